// Command hostile misbehaves on purpose, in the ways a Go plugin can, so tests can check the
// host holds Go plugins by the same limits as any other: the Go twin of plugins/hostile.
//
// Configuration: {"mode": "loop" | "sleep" | "goroutine" | "alloc" | "panic" | "count" |
// "churn"}.
// `loop` spins, `sleep` sleeps for an hour, `goroutine` waits for a goroutine that sleeps for
// an hour, `alloc` keeps allocating, `panic` panics, `count` logs how many calls this instance
// has had (`count calls=N`), `churn` makes 5,000 host calls that hand over strings while
// producing garbage, so that collections start around them, then logs `churned`.
package main

import (
	"encoding/json"
	"strconv"
	"time"

	kw "example.invalid/kubewasm/sdk"
)

type hostile struct {
	kw.Plugin
	mode *string
}

// calls counts this instance's calls: a fresh instance starts again at 1.
var calls int

// hoard keeps what `alloc` allocated reachable.
var hoard [][]byte

func (h hostile) Init(config string) error {
	var c struct {
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return err
	}
	*h.mode = c.Mode
	return nil
}

func (hostile) Describe() kw.Manifest {
	return kw.NewManifest(kw.Subscribe(kw.ConfigMap))
}

func (h hostile) Handle(event kw.Event) error {
	switch *h.mode {
	case "loop":
		n := 0
		for {
			n++
		}
	case "sleep":
		time.Sleep(time.Hour)
	case "goroutine":
		done := make(chan struct{})
		go func() {
			time.Sleep(time.Hour)
			close(done)
		}()
		<-done
	case "alloc":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case "panic":
		panic("hostile: panic on " + event.Object().Key())
	case "churn":
		obj := event.Object()
		var garbage [][]byte
		for i := 0; i < 5000; i++ {
			garbage = append(garbage, make([]byte, 4096))
			if len(obj.Key()) == 0 || len(obj.Labels()) < 0 {
				return kw.Fatal("no key")
			}
			if len(garbage) > 64 {
				garbage = nil
			}
		}
		kw.Log.Info("churned", "key", obj.Key())
	case "count":
		calls++
		kw.Log.Info("count", "calls", strconv.Itoa(calls))
	}
	return nil
}

func init() { kw.ExportHandler(hostile{mode: new(string)}) }

func main() {}
