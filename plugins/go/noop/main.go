// Command noop subscribes to pods and does nothing with them: what a delivery into a Go
// plugin costs by itself (host/benches/delivery.rs).
package main

import kw "example.invalid/kubewasm/sdk"

type noop struct{ kw.Plugin }

func (noop) Describe() kw.Manifest { return kw.NewManifest(kw.Subscribe(kw.Pod)) }

func (noop) Handle(kw.Event) error { return nil }

func init() { kw.ExportHandler(noop{}) }

func main() {}
