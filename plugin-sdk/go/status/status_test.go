package status

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

type statusCase struct {
	About      string         `json:"about"`
	Status     map[string]any `json:"status"`
	Conditions []Condition    `json:"conditions"`
	Fields     map[string]any `json:"fields"`
	Now        string         `json:"now"`
	Apply      map[string]any `json:"apply"`
}

// The Go SDK's status helper writes what the Rust SDK's does, case by case:
// plugin-sdk/status-cases.json is checked by all four SDKs.
func TestWritesWhatTheOtherSDKsWrite(t *testing.T) {
	text, err := os.ReadFile("../../status-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []statusCase
	if err := json.Unmarshal(text, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		s := New()
		for _, cond := range c.Conditions {
			s.Condition(cond)
		}
		for name, value := range c.Fields {
			s.Field(name, value)
		}
		got := s.Changes(c.Status, c.Now)
		if !reflect.DeepEqual(got, c.Apply) {
			t.Errorf("%s: got %v, want %v", c.About, got, c.Apply)
		}
	}
}

func TestAConditionSetTwiceIsKeptOnce(t *testing.T) {
	s := New().Condition(NewCondition("Ready", false, "Waiting", "")).
		Condition(NewCondition("Ready", true, "Running", "").ObservedGeneration(2))
	got := s.Changes(nil, "t")["conditions"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["status"] != "True" ||
		got[0].(map[string]any)["observedGeneration"] != float64(2) {
		t.Fatalf("%v", got)
	}
	if Unknown("Ready", "", "").Status != "Unknown" {
		t.Fatal("Unknown")
	}
}
