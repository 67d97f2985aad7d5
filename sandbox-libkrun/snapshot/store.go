package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Key is what a restored machine cannot change, so what a snapshot is made for: a snapshot of
// one key is never restored for another.
type Key struct {
	Firmware    string `json:"firmware"`        // SHA-256 of the firmware's kernel and initramfs
	Image       string `json:"image"`           // the image's digest
	Agent       string `json:"agent"`           // guest agent protocol revision
	Accelerator string `json:"accelerator"`     // kvm, hvf or tcg
	Arch        string `json:"arch"`            // guest architecture
	CPUs        int    `json:"cpus"`            // vCPUs
	MemoryMB    int    `json:"memory_mb"`       // guest RAM
	ScratchMB   int    `json:"scratch_mb"`      // the tmpfs upper layer of the root
	Version     string `json:"adapter_version"` // the adapter that made it (its warm-up, its disk layout)
}

// ID names the snapshot directory of k: the first 24 hex digits of the SHA-256 of its JSON.
func (k Key) ID() string {
	b, _ := json.Marshal(k)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// The files of a snapshot directory.
const (
	DiskFile    = "root.ext4"    // the image's root, read-only ext4
	MachineFile = "machine.snap" // qemu's saved machine: its devices' state
	RAMFile     = "ram.img"      // the saved machine's RAM, sparse, mapped copy-on-write by each copy
	MetaFile    = "meta.json"    // Meta; written last, so a directory without it is incomplete
)

// Meta describes a complete snapshot.
type Meta struct {
	Key           Key               `json:"key"`
	KernelRelease string            `json:"kernel_release"`
	Sizes         map[string]int64  `json:"sizes"`
	SHA256        map[string]string `json:"sha256"`
	MadeMS        int64             `json:"made_ms"` // time to make it
	Created       time.Time         `json:"created"`
}

// Entry is a snapshot found in the store.
type Entry struct {
	Dir  string
	Meta Meta
}

// Disk is the entry's root disk.
func (e Entry) Disk() string { return filepath.Join(e.Dir, DiskFile) }

// Machine is the entry's saved machine: its devices' state and its RAM.
func (e Entry) Machine() vm.SnapshotFiles {
	return vm.SnapshotFiles{Machine: filepath.Join(e.Dir, MachineFile), RAM: filepath.Join(e.Dir, RAMFile)}
}

// files are the files of a snapshot that Meta records.
var files = []string{DiskFile, MachineFile, RAMFile}

// Store is the snapshot directory (~/.iii/sandbox/snapshots): one 0700 directory per key
// holding 0600 files, bounded by LimitMB (the least recently used removed first).
type Store struct {
	Dir     string
	LimitMB int64

	mu       sync.Mutex
	verified map[string]string // entry → the sizes and times of its files when their checksums last matched
}

// DefaultDir is ~/.iii/sandbox/snapshots.
func DefaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return iiidir.Under(home, iiidir.SnapshotsDir)
}

// NewStore is the store in dir bounded by limitMB.
func NewStore(dir string, limitMB int64) *Store {
	return &Store{Dir: dir, LimitMB: limitMB, verified: map[string]string{}}
}

// ErrNone says the store has no snapshot of a key (yet).
var ErrNone = errors.New("no snapshot")

// Lookup returns the snapshot of k. A missing one is ErrNone; one whose metadata, sizes or
// checksums do not match is removed and the error says why. The checksums are computed the first
// time this process uses the entry and again whenever one of its files changed (size or
// modification time) since. A found entry counts as used now (for LRU).
func (s *Store) Lookup(k Key) (Entry, error) {
	e := Entry{Dir: filepath.Join(s.Dir, k.ID())}
	b, err := os.ReadFile(filepath.Join(e.Dir, MetaFile))
	if errors.Is(err, os.ErrNotExist) {
		return e, ErrNone
	}
	if err == nil {
		err = json.Unmarshal(b, &e.Meta)
	}
	if err == nil {
		err = s.check(e, k)
	}
	if err != nil {
		os.RemoveAll(e.Dir)
		s.forget(e.Dir)
		return e, fmt.Errorf("snapshot %s discarded: %w", e.Dir, err)
	}
	now := time.Now()
	_ = os.Chtimes(e.Dir, now, now)
	return e, nil
}

func (s *Store) forget(dir string) {
	s.mu.Lock()
	delete(s.verified, dir)
	s.mu.Unlock()
}

// check compares e with k and its files with their recorded sizes and, unless they are as when
// last verified, their SHA-256.
func (s *Store) check(e Entry, k Key) error {
	if e.Meta.Key != k {
		return errors.New("made for another key")
	}
	fp, err := fingerprint(e.Dir)
	if err != nil {
		return err
	}
	for _, name := range files {
		st, err := os.Stat(filepath.Join(e.Dir, name))
		if err != nil {
			return err
		}
		if st.Size() != e.Meta.Sizes[name] {
			return fmt.Errorf("%s is %d bytes, %d recorded (truncated?)", name, st.Size(), e.Meta.Sizes[name])
		}
	}
	s.mu.Lock()
	done := s.verified[e.Dir] == fp
	s.mu.Unlock()
	if done {
		return nil
	}
	for _, name := range files {
		sum, err := fileSHA256(filepath.Join(e.Dir, name))
		if err != nil {
			return err
		}
		if sum != e.Meta.SHA256[name] {
			return fmt.Errorf("%s fails its checksum", name)
		}
	}
	s.mu.Lock()
	s.verified[e.Dir] = fp
	s.mu.Unlock()
	return nil
}

// fingerprint is the sizes and modification times of the files of the entry in dir.
func fingerprint(dir string) (string, error) {
	var b strings.Builder
	for _, name := range files {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %d %d;", name, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// VerifyAll checks every complete snapshot in the store as Lookup does (its metadata, sizes and
// checksums), so that the first restore of each after the adapter starts does not pay for the
// checksums; a snapshot that fails is removed and its error returned.
func (s *Store) VerifyAll() []error {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil
	}
	var errs []error
	for _, d := range ents {
		if !d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
			continue
		}
		e := Entry{Dir: filepath.Join(s.Dir, d.Name())}
		b, err := os.ReadFile(filepath.Join(e.Dir, MetaFile))
		if err == nil {
			err = json.Unmarshal(b, &e.Meta)
		}
		if err == nil && e.Meta.Key.ID() != d.Name() {
			err = errors.New("stored under another key's name")
		}
		if err == nil {
			err = s.check(e, e.Meta.Key)
		}
		if err != nil {
			os.RemoveAll(e.Dir)
			s.forget(e.Dir)
			errs = append(errs, fmt.Errorf("snapshot %s discarded: %w", e.Dir, err))
		}
	}
	return errs
}

// Discard removes the snapshot of k (one that failed to restore).
func (s *Store) Discard(k Key) {
	dir := filepath.Join(s.Dir, k.ID())
	os.RemoveAll(dir)
	s.forget(dir)
}

// Make builds the snapshot of k: build writes DiskFile, MachineFile and RAMFile into the directory it is
// given (a temporary one in the store) and returns the guest's kernel release. The directory is
// then checksummed, described and renamed into place, and the store pruned to its limit.
func (s *Store) Make(k Key, build func(dir string) (kernelRelease string, err error)) (Entry, error) {
	start := time.Now()
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return Entry{}, err
	}
	_ = os.Chmod(s.Dir, 0o700)
	tmp, err := os.MkdirTemp(s.Dir, ".tmp-"+k.ID()+"-")
	if err != nil {
		return Entry{}, err
	}
	defer os.RemoveAll(tmp)
	release, err := build(tmp)
	if err != nil {
		return Entry{}, err
	}
	meta := Meta{Key: k, KernelRelease: release, Sizes: map[string]int64{}, SHA256: map[string]string{}, Created: time.Now().UTC()}
	for _, name := range files {
		p := filepath.Join(tmp, name)
		if err := os.Chmod(p, 0o600); err != nil {
			return Entry{}, err
		}
		st, err := os.Stat(p)
		if err != nil {
			return Entry{}, err
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return Entry{}, err
		}
		meta.Sizes[name], meta.SHA256[name] = st.Size(), sum
	}
	meta.MadeMS = time.Since(start).Milliseconds()
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return Entry{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, MetaFile), append(b, '\n'), 0o600); err != nil {
		return Entry{}, err
	}
	dst := filepath.Join(s.Dir, k.ID())
	os.RemoveAll(dst)
	s.forget(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return Entry{}, err
	}
	if fp, err := fingerprint(dst); err == nil {
		s.mu.Lock()
		s.verified[dst] = fp
		s.mu.Unlock()
	}
	s.Prune(k.ID())
	return Entry{Dir: dst, Meta: meta}, nil
}

// Prune removes the least recently used snapshots until the store holds at most LimitMB, never
// the one named keep; leftovers of interrupted makes (.tmp-*) older than an hour go too.
func (s *Store) Prune(keep string) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return
	}
	type snap struct {
		name  string
		used  time.Time
		bytes int64
	}
	var all []snap
	var total int64
	for _, d := range ents {
		if !d.IsDir() {
			continue
		}
		info, err := d.Info()
		if err != nil {
			continue
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			if time.Since(info.ModTime()) > time.Hour {
				os.RemoveAll(filepath.Join(s.Dir, d.Name()))
			}
			continue
		}
		sn := snap{name: d.Name(), used: info.ModTime()}
		files, _ := os.ReadDir(filepath.Join(s.Dir, d.Name()))
		for _, f := range files {
			if fi, err := f.Info(); err == nil {
				sn.bytes += onDisk(fi)
			}
		}
		total += sn.bytes
		all = append(all, sn)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, sn := range all {
		if total <= s.LimitMB<<20 {
			return
		}
		if sn.name == keep {
			continue
		}
		os.RemoveAll(filepath.Join(s.Dir, sn.name))
		s.forget(filepath.Join(s.Dir, sn.name))
		total -= sn.bytes
	}
}

// onDisk is the bytes fi's file holds on disk: a sparse file's holes (the RAM's) do not count.
func onDisk(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
