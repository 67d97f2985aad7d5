package debimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
)

// A preset's /tmp is world-writable and sticky (1777), as on any Linux system.
func TestFinishRootTmpIsSticky(t *testing.T) {
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("busybox (busybox-static) is needed for the applet list")
	}
	other := guestarch.AArch64 // an emulated architecture takes the applets from the host's busybox
	if other.Native() {
		other = guestarch.X86_64
	}
	root := t.TempDir()
	if err := finishRoot(context.Background(), root, other); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&(os.ModePerm|os.ModeSticky) != os.ModePerm|os.ModeSticky {
		t.Fatalf("/tmp mode %s, want drwxrwxrwt", st.Mode())
	}
}
