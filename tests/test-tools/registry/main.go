// Command registry is the CNCF distribution registry (filesystem storage, htpasswd auth),
// built from the Go module proxy for tests. `registry htpasswd USER PASSWORD` prints an
// htpasswd line (bcrypt), since the registry reads no other hash.
package main

import (
	"fmt"
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "htpasswd" {
		hash, err := bcrypt.GenerateFromPassword([]byte(os.Args[3]), bcrypt.MinCost)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%s:%s\n", os.Args[2], hash)
		return
	}
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
