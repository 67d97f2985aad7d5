package adapter

import (
	"fmt"
	"testing"
)

// TestEngineAccess: a VM worker is granted only the port of an engine on the host's loopback,
// at 127.0.0.1 (where qemu lands the guest's gateway); an engine elsewhere gets none.
func TestEngineAccess(t *testing.T) {
	for url, want := range map[string]string{
		"ws://127.0.0.1:49134":     "[127.0.0.1:49134]",
		"ws://localhost:5000":      "[127.0.0.1:5000]",
		"ws://127.0.0.1:5000/path": "[127.0.0.1:5000]",
		"ws://[::1]:5000":          "[]",
		"ws://127.0.0.2:5000":      "[]",
		"ws://127.0.0.1":           "[127.0.0.1:80]",
		"wss://localhost":          "[127.0.0.1:443]",
		"ws://192.0.2.2:49134":     "[]",
		"ws://engine.example:443":  "[]",
		"ws://127.0.0.1:0":         "[]",
		"::not a url":              "[]",
	} {
		if got := fmt.Sprint(EngineAccess(url)); got != want {
			t.Errorf("EngineAccess(%q) = %s, want %s", url, got, want)
		}
	}
}
