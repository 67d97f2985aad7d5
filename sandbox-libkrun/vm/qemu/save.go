package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// Saving a running machine. A restored machine maps its RAM private, so qemu's x-ignore-shared
// would not leave it out of the migration stream, and a copy restored from such a stream would
// have to load all of it instead of sharing the RAM file's pages. Save therefore writes the whole
// machine (RAM included) to a temporary stream while the machine is paused, lets it go on, and
// then has a second qemu, with nothing running, load that stream into a new RAM file mapped
// shared and save its devices alone: the same two files Snapshot makes, restored alike.

var _ vm.Saver = (*Driver)(nil)

// Save saves the running machine vmm to dst (mode 0600 files written beside their names and
// renamed into place) and lets it go on; the machine is paused only while its state is written
// to a temporary file. vmm must be a machine this driver restored from a snapshot (a root disk,
// no networking, a monitor to save it through); another fails with vm.ErrNotSavable.
func (d *Driver) Save(ctx context.Context, vmm vm.Machine, dst vm.SnapshotFiles) (vm.Spec, vm.SnapshotInfo, error) {
	return d.saveRunning(ctx, vmm, dst, true)
}

// Park writes the running machine vmm whole (RAM and devices) to dst.Machine and ends it once
// the stream is complete (vm.Saver); dst.RAM is not written. No other machine maps a parked
// machine's RAM, so the RAM file Save makes (a second qemu loading the stream) would only cost
// time: Restore loads this stream whole instead, given no RAM file. A failed park lets the
// machine go on.
func (d *Driver) Park(ctx context.Context, vmm vm.Machine, dst vm.SnapshotFiles) (vm.Spec, vm.SnapshotInfo, error) {
	return d.saveRunning(ctx, vmm, dst, false)
}

func (d *Driver) saveRunning(ctx context.Context, vmm vm.Machine, dst vm.SnapshotFiles, goOn bool) (vm.Spec, vm.SnapshotInfo, error) {
	var info vm.SnapshotInfo
	m, ok := vmm.(*machine)
	switch {
	case !ok:
		return vm.Spec{}, info, fmt.Errorf("%w: it is not a qemu machine", vm.ErrNotSavable)
	case m.spec.RootDisk == "" || m.qmpSock == "":
		return vm.Spec{}, info, fmt.Errorf("%w: its root is served over a file share, not a disk image (only a machine restored from a snapshot can be saved)", vm.ErrNotSavable)
	case m.spec.Network:
		return vm.Spec{}, info, fmt.Errorf("%w: it has networking", vm.ErrNotSavable)
	}
	select {
	case <-m.done:
		return vm.Spec{}, info, ErrStopped
	default:
	}
	spec := vm.Spec{RootDisk: m.spec.RootDisk, CPUs: m.spec.CPUs, MemoryMB: m.spec.MemoryMB, ScratchMB: m.spec.ScratchMB,
		Env: append([]string(nil), m.spec.Env...)}
	t := time.Now()
	files := []string{dst.Machine}
	var err error
	if goOn {
		files = append(files, dst.RAM)
		info.Paused, err = d.saveSplit(ctx, m, spec, dst)
	} else {
		info.Paused, err = d.saveParked(ctx, m, dst)
	}
	if err != nil {
		return vm.Spec{}, info, err
	}
	if !goOn {
		m.kill()
	}
	info.Save = time.Since(t)
	info.KernelRelease = m.release
	for _, f := range files {
		n, err := diskBytes(f)
		if err != nil {
			return vm.Spec{}, info, err
		}
		info.Size += n
	}
	return spec, info, nil
}

// saveParked writes m whole to dst.Machine, leaving it stopped, and reports how long that took.
// A failure lets m go on.
func (d *Driver) saveParked(ctx context.Context, m *machine, dst vm.SnapshotFiles) (time.Duration, error) {
	full, err := tempBeside(dst.Machine)
	if err != nil {
		return 0, err
	}
	defer os.Remove(full)
	t := time.Now()
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return 0, err
	}
	if err := d.saveWhole(ctx, m, f, false); err != nil {
		return 0, err
	}
	paused := time.Since(t)
	if err := keepStream(full, dst); err != nil {
		// Nothing was kept: the machine goes on rather than being lost.
		if q, qerr := dialQMP(ctx, m.qmpSock, m.qemu); qerr == nil {
			_ = cont(ctx, q)
			q.Close()
		}
		return 0, err
	}
	return paused, nil
}

// saveSplit saves m to dst (a RAM file and its devices) and lets it go on; it reports how long m
// was paused. m's whole stream is piped into split's qemu, started meanwhile, which loads it as
// it comes: nothing is written to disk but the snapshot's own files, and the second qemu's start
// overlaps the first's stopping.
func (d *Driver) saveSplit(ctx context.Context, m *machine, spec vm.Spec, dst vm.SnapshotFiles) (time.Duration, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	growPipe(pw)
	split := make(chan error, 1)
	go func() {
		err := d.split(ctx, spec, pr, dst)
		pr.Close() // a split that never started its qemu must not leave the writer blocked
		split <- err
	}()
	t := time.Now()
	err = d.saveWhole(ctx, m, pw, true)
	paused := time.Since(t)
	// Writing the stream read every page of m's RAM file into m's memory; it needs back only
	// what its guest touches.
	releaseFileRAM(m.qemu, m.ram)
	pw.Close() // a save that failed before qemu took the pipe ends the loading qemu's wait
	return paused, errors.Join(err, <-split)
}

// saveWhole pauses m, writes its RAM and devices to f (closed once qemu holds it) and lets it go
// on, unless goOn is false and the save succeeded.
func (d *Driver) saveWhole(ctx context.Context, m *machine, f *os.File, goOn bool) error {
	q, err := dialQMP(ctx, m.qmpSock, m.qemu)
	if err != nil {
		f.Close()
		return err
	}
	defer q.Close()
	if _, err := q.execute("stop", nil); err != nil {
		f.Close()
		return err
	}
	var errs []error
	// A restored machine's monitor was told its stream leaves shared RAM out: this stream must
	// carry the RAM, in the format the loading qemu (without the capability) expects.
	if _, err := q.execute("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": false}}}); err != nil {
		errs = append(errs, err)
		f.Close()
	} else if _, err := q.execute("migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		errs = append(errs, err)
		f.Close()
	} else if err := q.migrateTo(ctx, f); err != nil {
		errs = append(errs, err)
	}
	// After a completed migration qemu has let go of the disk; cont takes it back and runs the guest.
	// A machine to be parked stays stopped once saved.
	if !goOn && len(errs) == 0 {
		return nil
	}
	if err := cont(ctx, q); err != nil {
		errs = append(errs, fmt.Errorf("resuming the saved machine: %w", err))
	}
	return errors.Join(errs...)
}

// keepStream renames the whole-machine stream full to dst.Machine, synced to disk first unless
// dst is transient.
func keepStream(full string, dst vm.SnapshotFiles) error {
	return renameSynced(full, dst.Machine, dst.Transient)
}

// renameSynced renames the file tmp to dst, syncing it to disk first unless transient (a file
// that need not survive a crash of the host).
func renameSynced(tmp, dst string, transient bool) error {
	if !transient {
		f, err := os.Open(tmp)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}

// cont runs a machine stopped by a save. qemu reports the migration completed before its own
// clean-up after it has run, and refuses cont until then ("Migration is not finalized yet"), so
// that refusal is retried for a while.
func cont(ctx context.Context, q *qmp) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := q.execute("cont", nil)
		if err == nil || !strings.Contains(err.Error(), "not finalized") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// split loads the whole-machine stream read from full into a stopped qemu of spec whose RAM is a
// new file beside dst.RAM, mapped shared, saves its devices to dst.Machine and renames the RAM
// file, made sparse, to dst.RAM.
func (d *Driver) split(ctx context.Context, spec vm.Spec, full *os.File, dst vm.SnapshotFiles) error {
	spec, err := checkSpec(spec)
	if err != nil {
		return err
	}
	ram, err := tempBeside(dst.RAM)
	if err != nil {
		return err
	}
	defer os.Remove(ram)
	ownState, err := prepareStateDir(&spec)
	if err != nil {
		return err
	}
	h, err := newMachine(spec, ownState)
	if err != nil {
		return err
	}
	defer h.kill()
	h.qmpSock = h.sockDir + "/qmp.sock"
	h.incoming, h.keepRAM, h.ram = true, true, ram
	ctx, cancel := context.WithTimeout(ctx, d.opt.BootTimeout)
	defer cancel()
	if err := d.load(ctx, h, full); err != nil {
		h.killProcs()
		return fmt.Errorf("vm: loading the saved machine: %w%s", err, h.consoleTail())
	}
	if err := d.save(ctx, h, dst.Machine, dst.Transient); err != nil {
		return err
	}
	h.kill()
	if err := finishRAM(ram, dst.Transient); err != nil {
		return fmt.Errorf("vm: the snapshot's RAM %s: %w", ram, err)
	}
	return os.Rename(ram, dst.RAM)
}

// load starts h's qemu waiting for a stream and loads the stream read from f into it; f is
// closed once qemu holds its own descriptor.
func (d *Driver) load(ctx context.Context, h *machine, f *os.File) error {
	log, err := os.Create(h.console)
	if err != nil {
		f.Close()
		return err
	}
	defer log.Close()
	h.snapFile = f
	err = d.startQemu(ctx, h, d.Accel(), nil, log)
	f.Close()
	h.snapFile = nil
	if err != nil {
		return err
	}
	q, err := dialQMP(ctx, h.qmpSock, h.qemu)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := setCapabilities(q, "events"); err != nil {
		return err
	}
	if _, err := q.execute("migrate-incoming", map[string]any{"uri": "fd:3"}); err != nil {
		return err
	}
	return q.awaitMigration()
}
