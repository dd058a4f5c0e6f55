// Command cosign is sigstore's cosign, built from the Go module proxy, for tests that sign
// plugin artifacts with a key.
package main

import (
	"os"

	"github.com/sigstore/cosign/v2/cmd/cosign/cli"
)

func main() {
	if err := cli.New().Execute(); err != nil {
		os.Exit(1)
	}
}
