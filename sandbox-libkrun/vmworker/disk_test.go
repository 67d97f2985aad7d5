package vmworker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

// diskManager is a Manager over the fake driver whose VM worker w1 runs from a fresh project.
func diskManager(t *testing.T, diskMB int, mkfs string, logf func(string, ...any)) (*Manager, *fakeDriver, string) {
	t.Helper()
	base := t.TempDir()
	project := filepath.Join(base, "project")
	write(t, filepath.Join(project, "main.py"), "print(1)")
	drv := &fakeDriver{}
	state := filepath.Join(base, "home", ".iii", "sandbox", "workers")
	m := New(Options{Driver: drv, Images: images{}, Roots: NewRoots([]string{project}), StateRoot: state,
		RunDir: filepath.Join(base, "run"), DiskMB: diskMB, Mkfs: mkfs, Logf: logf})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m, drv, project
}

func startW1(m *Manager, project string) error {
	_, err := m.Start(context.Background(), json.RawMessage(`{"vm_id":"w1","image":"img","dir":"`+project+`","command":["python3","main.py"]}`))
	return err
}

func stopW1(t *testing.T, m *Manager) {
	t.Helper()
	if _, err := m.Stop(context.Background(), json.RawMessage(`{"vm_id":"w1"}`)); err != nil {
		t.Fatal(err)
	}
}

// The first boot formats a sparse ext4 image of worker_disk_mb in the state directory (mode
// 0600 in a 0700 directory) and hands it to the machine; the next boot gets the same file, not a
// new one; worker::delete removes it with the state directory.
func TestStateDiskLifecycle(t *testing.T) {
	mkfs := FindMkfs(os.Getenv)
	if mkfs == "" {
		t.Skip("mkfs.ext4 is not installed (e2fsprogs; go tool mage setup installs it)")
	}
	m, drv, project := diskManager(t, 64, mkfs, nil)
	if err := startW1(m, project); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(m.StateDir("w1"), DiskFile)
	if drv.specs[0].Disk != disk {
		t.Fatalf("spec.Disk = %q, want %q", drv.specs[0].Disk, disk)
	}
	st, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != 64<<20 {
		t.Fatalf("disk mode %v size %d", st.Mode(), st.Size())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Blocks*512 >= st.Size()/2 {
		t.Fatalf("the disk is not sparse: %d of %d bytes allocated", sys.Blocks*512, st.Size())
	}
	for _, dir := range []string{m.StateDir("w1"), filepath.Dir(m.StateDir("w1"))} {
		if dst, err := os.Stat(dir); err != nil || dst.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", dir, dst.Mode(), err)
		}
	}
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	sb := make([]byte, 2)
	_, err = f.ReadAt(sb, 1024+0x38) // the ext2/3/4 superblock magic
	f.Close()
	if err != nil || binary.LittleEndian.Uint16(sb) != 0xef53 {
		t.Fatalf("no ext4 superblock: % x %v", sb, err)
	}
	if _, err := os.Stat(disk + ".new"); !os.IsNotExist(err) {
		t.Fatal("the temporary image was left behind")
	}
	// The guest's writes, modelled by a byte at the disk's end, are there at the next boot.
	mark(t, disk, "kept")
	stopW1(t, m)
	if err := startW1(m, project); err != nil {
		t.Fatal(err)
	}
	if drv.specs[1].Disk != disk || readMark(t, disk) != "kept" {
		t.Fatalf("second boot: disk %q, mark %q", drv.specs[1].Disk, readMark(t, disk))
	}
	if _, err := m.Delete(context.Background(), json.RawMessage(`{"vm_id":"w1"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.StateDir("w1")); !os.IsNotExist(err) {
		t.Fatalf("delete left the state directory: %v", err)
	}
}

func mark(t *testing.T, disk, s string) {
	t.Helper()
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(s), 64<<20-int64(len(s))); err != nil {
		t.Fatal(err)
	}
}

func readMark(t *testing.T, disk string) string {
	t.Helper()
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[len(b)-4:])
}

// A failed format fails the start with S300 naming the state directory and mkfs's message, and
// leaves no image behind that a later boot would take for a formatted one.
func TestStateDiskFormatFails(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "mkfs.ext4")
	write(t, fake, "#!/bin/sh\necho 'mkfs: no space left' >&2\nexit 1\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	m, drv, project := diskManager(t, 64, fake, nil)
	err := startW1(m, project)
	e, ok := scode.As(err)
	if !ok || e.Code != scode.S300 || !strings.Contains(e.Message, m.StateDir("w1")) || !strings.Contains(e.Message, "mkfs: no space left") {
		t.Fatalf("want S300 naming the state dir and mkfs's error, got %v", err)
	}
	if len(drv.specs) != 0 {
		t.Fatal("a machine booted without its state disk")
	}
	for _, name := range []string{DiskFile, DiskFile + ".new"} {
		if _, err := os.Stat(filepath.Join(m.StateDir("w1"), name)); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", name, err)
		}
	}
}

// Without mkfs.ext4 the worker still boots, with no state disk, and the adapter's log says that
// its writes outside its directory are lost and how to install mkfs; worker_disk_mb 0 asks for
// no disk and says nothing.
func TestStateDiskAbsent(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logf := func(format string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	m, drv, project := diskManager(t, 64, "", logf)
	m.opt.Mkfs = "" // as on a host where FindMkfs found none
	if err := startW1(m, project); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	joined := strings.Join(logs, "\n")
	mu.Unlock()
	if drv.specs[0].Disk != "" || !strings.Contains(joined, "VM worker w1: no state disk") || !strings.Contains(joined, "install e2fsprogs") {
		t.Fatalf("disk %q, log:\n%s", drv.specs[0].Disk, joined)
	}
	m0, drv0, project0 := diskManager(t, 0, "/nonexistent/mkfs.ext4", nil)
	if err := startW1(m0, project0); err != nil {
		t.Fatal(err)
	}
	if drv0.specs[0].Disk != "" {
		t.Fatalf("worker_disk_mb 0 booted with a disk %q", drv0.specs[0].Disk)
	}
}

// Shutdown stops the VM workers side by side: three machines that each take 1 s to power off
// are all gone in well under 3 s.
func TestShutdownSideBySide(t *testing.T) {
	m, drv, project := diskManager(t, 0, "", nil)
	drv.stopDelay = time.Second
	for _, id := range []string{"a", "b", "c"} {
		if _, err := m.Start(context.Background(), json.RawMessage(`{"vm_id":"`+id+`","image":"img","dir":"`+project+`","command":["x"]}`)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	m.Shutdown(context.Background())
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("Shutdown took %s for three 1 s stops", took)
	}
	for _, id := range []string{"a", "b", "c"} {
		if st := m.status(id); st.State != StateStopped {
			t.Fatalf("%s: %s", id, st.State)
		}
	}
}

// A disk smaller than worker_disk_mb is made larger (its bytes kept; the guest grows the file
// system at boot); a larger one is kept as it is and the log says a disk never shrinks. Neither
// runs mkfs again.
func TestStateDiskResize(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logf := func(format string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	m, drv, project := diskManager(t, 96, "/nonexistent/mkfs.ext4", logf)
	disk := filepath.Join(m.StateDir("w1"), DiskFile)
	write(t, disk, "formatted before")
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := startW1(m, project); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(disk)
	if err != nil || st.Size() != 96<<20 || drv.specs[0].Disk != disk {
		t.Fatalf("grown disk: %v %v, spec %q", st.Size(), err, drv.specs[0].Disk)
	}
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 16)
	_, err = f.ReadAt(head, 0)
	f.Close()
	if err != nil || string(head) != "formatted before" {
		t.Fatalf("growing the disk lost its bytes: %q %v", head, err)
	}
	stopW1(t, m)
	m.opt.DiskMB = 32
	if err := startW1(m, project); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(disk); err != nil || st.Size() != 96<<20 {
		t.Fatalf("a larger disk was changed: %v %v", st.Size(), err)
	}
	mu.Lock()
	joined := strings.Join(logs, "\n")
	mu.Unlock()
	if !strings.Contains(joined, "grown to 96 MiB") || !strings.Contains(joined, "a disk never shrinks") {
		t.Fatalf("log:\n%s", joined)
	}
}
