package addrkey

import "testing"

func TestOneKeyPerEngine(t *testing.T) {
	for _, u := range []string{"ws://127.0.0.1:49134", "ws://localhost:49134", "ws://LOCALHOST:49134/", "ws://0.0.0.0:49134", "ws://[::]:49134"} {
		got, err := URL(u)
		if err != nil || got != "127.0.0.1_49134" {
			t.Errorf("URL(%q) = %q, %v; want 127.0.0.1_49134", u, got, err)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"ws://[::1]:5", "%3A%3A1_5"},
		{"wss://engine.example", "engine.example_443"},
		{"ws://engine.example", "engine.example_80"},
	} {
		if got, err := URL(c.url); err != nil || got != c.want {
			t.Errorf("URL(%q) = %q, %v; want %q", c.url, got, err, c.want)
		}
	}
	if got := Addr("", "7"); got != "127.0.0.1_7" {
		t.Errorf("Addr(\"\", 7) = %q", got)
	}
	for _, bad := range []string{"http://127.0.0.1:1", "ws://", "::"} {
		if _, err := URL(bad); err == nil {
			t.Errorf("URL(%q) accepted", bad)
		}
	}
}
