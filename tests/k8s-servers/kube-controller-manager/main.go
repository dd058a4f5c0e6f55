// Command kube-controller-manager is the real Kubernetes controller manager, built from the Go
// module proxy at the same version as the test kube-apiserver: its garbage collector,
// namespace, Deployment, ReplicaSet and Job controllers run beside it in the end-to-end
// environment where a test asks for them.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
