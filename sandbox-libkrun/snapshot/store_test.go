package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fakeBuild(data string) func(dir string) (string, error) {
	return func(dir string) (string, error) {
		for _, n := range files {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(n+data), 0o644); err != nil {
				return "", err
			}
		}
		return "6.1.0-test", nil
	}
}

func TestMakeLookup(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "snapshots"), 100)
	k := Key{Firmware: "f", Image: "sha256:1", Agent: "a", Accelerator: "tcg", Arch: "x86_64", CPUs: 1, MemoryMB: 512, ScratchMB: 256}
	if _, err := s.Lookup(k); !errors.Is(err, ErrNone) {
		t.Fatalf("empty store: %v", err)
	}
	if _, err := s.Make(k, fakeBuild("x")); err != nil {
		t.Fatal(err)
	}
	e, err := s.Lookup(k)
	if err != nil || e.Meta.KernelRelease != "6.1.0-test" {
		t.Fatalf("lookup: %+v %v", e, err)
	}
	for _, p := range []string{s.Dir, e.Dir} {
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", p, st.Mode())
		}
	}
	for _, n := range append(files, MetaFile) {
		if st, _ := os.Stat(filepath.Join(e.Dir, n)); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", n, st.Mode())
		}
	}
	other := k
	other.MemoryMB = 1024
	if other.ID() == k.ID() {
		t.Fatal("keys of other memory share an ID")
	}
	if _, err := s.Lookup(other); !errors.Is(err, ErrNone) {
		t.Fatalf("another key: %v", err)
	}
}

// A damaged or truncated file is found (by its checksum, which a changed file makes the store
// compute again, or by its size), reported and removed.
func TestDamaged(t *testing.T) {
	for _, c := range []struct{ file, damage string }{{MachineFile, "flip"}, {MachineFile, "truncate"}, {RAMFile, "flip"}, {RAMFile, "truncate"}} {
		t.Run(c.file+"/"+c.damage, func(t *testing.T) {
			s := NewStore(t.TempDir(), 100)
			k := Key{Image: "i", CPUs: 1}
			e, err := s.Make(k, fakeBuild("xyz"))
			if err != nil {
				t.Fatal(err)
			}
			data := []byte(c.file + "xyq")
			if c.damage == "truncate" {
				data = data[:4]
			}
			if err := os.WriteFile(filepath.Join(e.Dir, c.file), data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = s.Lookup(k)
			if err == nil || !strings.Contains(err.Error(), c.file) {
				t.Fatalf("damaged snapshot: %v", err)
			}
			if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
				t.Fatalf("damaged snapshot kept: %v", err)
			}
			if _, err := s.Lookup(k); !errors.Is(err, ErrNone) {
				t.Fatalf("after discard: %v", err)
			}
		})
	}
}

// Past the limit the least recently used snapshots go first; the one just made stays.
func TestPruneLRU(t *testing.T) {
	s := NewStore(t.TempDir(), 1)
	big := strings.Repeat("x", 300<<10) // three files: 900 KiB a snapshot
	var keys []Key
	for i := range 3 {
		k := Key{Image: "i", CPUs: i + 1}
		keys = append(keys, k)
		if _, err := s.Make(k, fakeBuild(big)); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(time.Duration(i-10) * time.Minute)
		_ = os.Chtimes(filepath.Join(s.Dir, k.ID()), old, old)
	}
	// keys[2] was made last (the first two were pruned as it came); a use makes keys[2] newest.
	if _, err := s.Lookup(keys[0]); !errors.Is(err, ErrNone) {
		t.Fatalf("oldest kept: %v", err)
	}
	if _, err := s.Lookup(keys[2]); err != nil {
		t.Fatalf("newest pruned: %v", err)
	}
}

// VerifyAll checks what an earlier process left: a sound snapshot is then known good (no
// checksum on its first lookup), a damaged one is removed with the reason.
func TestVerifyAll(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir, 100)
	good, bad := Key{Image: "good"}, Key{Image: "bad"}
	for _, k := range []Key{good, bad} {
		if _, err := s.Make(k, fakeBuild("data")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, bad.ID(), DiskFile), []byte(DiskFile+"dat4"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = NewStore(dir, 100) // a new process
	errs := s.VerifyAll()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), bad.ID()) || !strings.Contains(errs[0].Error(), "fails its checksum") {
		t.Fatalf("VerifyAll: %v", errs)
	}
	if _, err := os.Stat(filepath.Join(dir, bad.ID())); !os.IsNotExist(err) {
		t.Fatalf("damaged snapshot kept: %v", err)
	}
	s.mu.Lock()
	known := s.verified[filepath.Join(dir, good.ID())] != ""
	s.mu.Unlock()
	if !known {
		t.Fatal("the sound snapshot is not marked verified")
	}
	if _, err := s.Lookup(good); err != nil {
		t.Fatal(err)
	}
}
