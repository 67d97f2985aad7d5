package unixmode

import (
	"io/fs"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		bits uint32
		mode fs.FileMode
	}{
		{0o644, 0o644},
		{0o1777, fs.ModePerm | fs.ModeSticky},
		{0o4755, 0o755 | fs.ModeSetuid},
		{0o2750, 0o750 | fs.ModeSetgid},
		{0o7000, fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky},
	} {
		if got := FileMode(c.bits); got != c.mode {
			t.Errorf("FileMode(%#o) = %v, want %v", c.bits, got, c.mode)
		}
		if got := Bits(c.mode); got != c.bits {
			t.Errorf("Bits(%v) = %#o, want %#o", c.mode, got, c.bits)
		}
	}
	if got := Bits(fs.ModeDir | 0o755); got != 0o755 {
		t.Errorf("Bits ignores the type bits: got %#o", got)
	}
}
