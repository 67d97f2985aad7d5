package platform

import (
	"runtime"
	"testing"
)

func TestDetectAndParseAgree(t *testing.T) {
	cases := []struct{ goos, goarch, libc, want string }{
		{"linux", "amd64", "gnu", "x86_64-unknown-linux-gnu"},
		{"linux", "amd64", "musl", "x86_64-unknown-linux-musl"},
		{"linux", "arm64", "gnu", "aarch64-unknown-linux-gnu"},
		{"darwin", "arm64", "", "aarch64-apple-darwin"},
		{"darwin", "amd64", "", "x86_64-apple-darwin"},
		{"windows", "amd64", "", "x86_64-pc-windows-msvc"},
	}
	for _, c := range cases {
		got := Detect(c.goos, c.goarch, func() string { return c.libc })
		if got.Triple != c.want {
			t.Errorf("Detect(%s,%s,%s) = %s, want %s", c.goos, c.goarch, c.libc, got.Triple, c.want)
		}
		p := Parse(c.want)
		if p.GOOS != c.goos || p.GOARCH != c.goarch || p.Libc != got.Libc {
			t.Errorf("Parse(%s) = %+v, want %s/%s/%s", c.want, p, c.goos, c.goarch, got.Libc)
		}
	}
}

func TestOverride(t *testing.T) {
	getenv := func(k string) string { return map[string]string{OverrideEnv: "x86_64-unknown-linux-musl"}[k] }
	if h := Host(getenv); h.Libc != "musl" || h.GOOS != "linux" {
		t.Fatalf("Host() with override = %+v", h)
	}
	// No environment is the detected host, whatever the process's own variables say.
	t.Setenv(OverrideEnv, "x86_64-unknown-linux-musl")
	if h, d := Host(nil), Detect(runtime.GOOS, runtime.GOARCH, detectLibc); h != d {
		t.Fatalf("Host(nil) = %+v, want the detected %+v", h, d)
	}
}
