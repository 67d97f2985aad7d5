package tokens

import "testing"

func TestOneKeyPerEngine(t *testing.T) {
	for _, u := range []string{"ws://127.0.0.1:49134", "ws://localhost:49134", "ws://LOCALHOST:49134/", "ws://0.0.0.0:49134", "ws://[::]:49134"} {
		got, err := urlKey(u)
		if err != nil || got != "127.0.0.1_49134" {
			t.Errorf("urlKey(%q) = %q, %v; want 127.0.0.1_49134", u, got, err)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"ws://[::1]:5", "%3A%3A1_5"},
		{"wss://engine.example", "engine.example_443"},
		{"ws://engine.example", "engine.example_80"},
	} {
		if got, err := urlKey(c.url); err != nil || got != c.want {
			t.Errorf("urlKey(%q) = %q, %v; want %q", c.url, got, err, c.want)
		}
	}
	if got := addrKey("", "7"); got != "127.0.0.1_7" {
		t.Errorf("addrKey(\"\", 7) = %q", got)
	}
	for _, bad := range []string{"http://127.0.0.1:1", "ws://", "::"} {
		if _, err := urlKey(bad); err == nil {
			t.Errorf("urlKey(%q) accepted", bad)
		}
	}
}
