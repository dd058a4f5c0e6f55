// Command kube-apiserver is the real Kubernetes API server, built from the Go module proxy:
// v1.36, the first release serving sharded list and watch (KEP-5866, alpha).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
