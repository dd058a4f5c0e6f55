//go:build !wasip1

// `go test` builds the plugin (kubewasm build: Go for wasip1, then a component) and runs
// `kubewasm test` on its test file.
package main

import (
	"os"
	"os/exec"
	"testing"
)

// kubewasm is the binary that created this project; KUBEWASM overrides it.
func kubewasm() string {
	if k := os.Getenv("KUBEWASM"); k != "" {
		return k
	}
	return "{{kubewasm}}"
}

func TestThePluginPassesItsTestFile(t *testing.T) {
	for _, args := range [][]string{
		{"build", ".", "-o", "{{name}}.wasm"},
		{"test", "tests/{{name}}.test.yaml"},
	} {
		out, err := exec.Command(kubewasm(), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubewasm %v: %v\n%s", args, err, out)
		}
	}
}
