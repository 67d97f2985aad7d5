package webguard

import "testing"

func TestRebindSafeHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:49134": true, "127.8.9.1": true, "localhost:1": true, "LOCALHOST": true, "app.localhost:2": true,
		"[::1]:3": true, "localhost.:4": true, "evil.example:49134": false, "10.0.2.2:1": true, "[::]:1": true,
		"": false, "127.0.0.1.evil.example": false, "localhost.evil.example": false,
	} {
		if got := RebindSafeHost(host); got != want {
			t.Errorf("RebindSafeHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestOrigins(t *testing.T) {
	patterns := []string{"*.example.com", "https://app.example"}
	for _, c := range []struct {
		origin, host  string
		allowed, loop bool
	}{
		{"http://127.0.0.1:3112", "127.0.0.1:3112", true, true},
		{"http://localhost:3000", "127.0.0.1:3112", false, true},
		{"http://[::1]:3000", "127.0.0.1:3112", false, true},
		{"https://a.example.com", "127.0.0.1:3112", true, false},
		{"https://app.example", "127.0.0.1:3112", true, false},
		{"http://app.example", "127.0.0.1:3112", false, false},
		{"https://evil.example", "127.0.0.1:3112", false, false},
		{"http://localhost.evil.example", "127.0.0.1:3112", false, false},
		{"null", "127.0.0.1:3112", false, false},
	} {
		if got := OriginAllowed(c.origin, c.host, patterns); got != c.allowed {
			t.Errorf("OriginAllowed(%q, %q) = %v, want %v", c.origin, c.host, got, c.allowed)
		}
		if got := LoopbackOrigin(c.origin); got != c.loop {
			t.Errorf("LoopbackOrigin(%q) = %v, want %v", c.origin, got, c.loop)
		}
	}
}
