// Package config reads a plugin's configuration. It is a package of its own so that plugins
// without configuration do not link encoding/json (about 46 KB of component).
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Parse reads the operator's configuration (the JSON `Init` gets) into `into`, which holds
// the defaults; an unknown field is an error, and the error says what is wrong.
func Parse(config string, into any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}
