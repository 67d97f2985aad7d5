package firmware

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"

	"github.com/Masterminds/semver/v3"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
	"github.com/iii-go/iii/sandbox-libkrun/internal/dirlock"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// BundledFor returns the firmware of guest architecture a that the running adapter carries
// (BundleDirFor beside its executable), and whether it holds a manifest.
func BundledFor(a guestarch.Arch) (Paths, bool) {
	exe, err := os.Executable()
	if err != nil {
		return Paths{}, false
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	p := At(filepath.Join(filepath.Dir(exe), BundleDirFor(a)))
	_, err = os.Stat(p.Manifest)
	return p, err == nil
}

// Action says what Install did.
type Action string

// The outcomes of Install.
const (
	Installed Action = "installed" // the directory had no firmware: the carried one was copied in
	Replaced  Action = "replaced"  // an older firmware this adapter had installed was replaced
	Current   Action = "current"   // the directory already holds the carried firmware
	Kept      Action = "kept"      // the directory holds a firmware nobody installed through here (kept as is)
	Newer     Action = "newer"     // a newer adapter installed its firmware there (kept)
)

// Install puts the firmware of src into dst unless dst already holds it, and says what it did.
// It writes only the three firmware files, each verified against src's manifest while it is
// copied and renamed into place, under an exclusive lock on dst so that concurrent adapters
// install once. A firmware in dst that no adapter installed (no installed_by, for example one an
// operator put there) is never touched; one an older adapter installed is replaced, as is one
// whose guest agent this adapter cannot speak to.
func Install(src, dst Paths, adapterVersion string) (Action, error) {
	carried, err := ReadManifest(src)
	if err != nil {
		return "", fmt.Errorf("the adapter's carried firmware: %w", err)
	}
	if carried.SHA256[KernelFile] == "" || carried.SHA256[InitrdFile] == "" {
		return "", fmt.Errorf("the adapter's carried firmware: %s lists no sha256 for its files", src.Manifest)
	}
	if err := os.MkdirAll(dst.Dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := dirlock.Lock(dst.Dir, ".iii-vm-firmware.lock")
	if err != nil {
		return "", err
	}
	defer unlock()

	action := Installed
	if have, err := ReadManifest(dst); err == nil || present(dst.Kernel) || present(dst.Initrd) {
		switch {
		case err != nil || have.InstalledBy == "":
			return Kept, nil
		case maps.Equal(have.SHA256, carried.SHA256) && present(dst.Kernel) && present(dst.Initrd):
			return Current, nil
		case have.Agent == proto.AgentVersion && newer(have.InstalledBy, adapterVersion):
			return Newer, nil
		}
		action = Replaced
	}
	for _, f := range []struct{ from, to string }{{src.Kernel, dst.Kernel}, {src.Initrd, dst.Initrd}} {
		if err := copyVerified(f.from, f.to, carried.SHA256[filepath.Base(f.from)]); err != nil {
			return "", err
		}
	}
	carried.InstalledBy = adapterVersion
	if err := writeManifest(dst, carried); err != nil {
		return "", err
	}
	return action, nil
}

// newer reports whether version a is a later release than b (both semver; unparsable: false).
func newer(a, b string) bool {
	va, errA := semver.NewVersion(a)
	vb, errB := semver.NewVersion(b)
	return errA == nil && errB == nil && va.GreaterThan(vb)
}

func present(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// copyVerified copies from to a temporary file beside to, checks its SHA-256 against want and
// renames it over to; a mismatch leaves to untouched.
func copyVerified(from, to, want string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), in)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errors.New("the adapter's carried firmware is corrupt: " + from + " has sha256 " + got + ", its manifest says " + want + " (reinstall the adapter)")
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), to)
}
