package guestarch

import (
	"runtime"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"} {
		a, err := Parse(in)
		if err != nil || a.Name != want {
			t.Errorf("Parse(%q) = %q, %v", in, a.Name, err)
		}
	}
	if _, err := Parse("riscv64"); err == nil || err.Error() != `unknown guest architecture "riscv64" (accepted: x86_64, aarch64)` {
		t.Errorf("riscv64: %v", err)
	}
}

func TestHostIsNative(t *testing.T) {
	h := Host()
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		if h.GOARCH != runtime.GOARCH || !h.Native() {
			t.Fatalf("Host() = %+v on %s", h, runtime.GOARCH)
		}
	}
	for _, a := range All {
		if a.Native() != (a.GOARCH == runtime.GOARCH) {
			t.Errorf("%s: Native() = %v", a.Name, a.Native())
		}
	}
}

func TestMachines(t *testing.T) {
	if X86_64.Machine != "microvm" || AArch64.Machine != "virt" || AArch64.Console != "ttyAMA0" {
		t.Fatal("machine table changed")
	}
}
