// Package vm is the boundary between the adapter's sandbox API and the machines that run it: a
// Driver boots a Machine from a Spec; a Machine runs commands and file operations through the
// guest agent and is stopped (and its processes killed) by Stop.
package vm

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"time"
)

// Driver boots machines. The Linux driver runs qemu's microvm machine (KVM when a probe boot
// works, TCG otherwise); a libkrun driver may sit behind the same interface.
type Driver interface {
	// Name says which driver and acceleration is in use, e.g. "qemu-microvm/tcg".
	Name() string
	// Boot starts a machine and returns once its guest agent answers, or fails with the tail of
	// the VM's console output in the error.
	Boot(ctx context.Context, spec Spec) (Machine, error)
}

// Snapshotter is a Driver that can save a machine to files and start copies of it (the qemu
// driver). Only a machine whose root is a Spec.RootDisk, without networking, can be saved.
type Snapshotter interface {
	// Snapshot boots a machine of spec, runs warm on it, saves it to dst and stops it.
	Snapshot(ctx context.Context, spec Spec, dst SnapshotFiles, warm func(context.Context, Machine) error) (SnapshotInfo, error)
	// Restore starts a copy of the machine saved in src (made with the same CPUs, memory, scratch
	// size and root disk) with its own randomness, the host's clock and spec.Hostname.
	Restore(ctx context.Context, spec Spec, src SnapshotFiles, kernelRelease string) (Machine, error)
}

// Saver is a Driver that can save a machine it runs without stopping it (the qemu driver): the
// machine pauses while its state is written, then goes on. Only a machine whose root is a
// Spec.RootDisk and that has no networking can be saved (one restored from a snapshot); another
// fails with an error wrapping ErrNotSavable that says why.
type Saver interface {
	// Save writes m's RAM and devices to dst and returns the Spec a copy is restored with (its
	// RootDisk, CPUs, MemoryMB, ScratchMB and Env) and the guest kernel's release in Info.
	Save(ctx context.Context, m Machine, dst SnapshotFiles) (Spec, SnapshotInfo, error)
	// Park saves m and stops it instead of letting it go on: the machine is ended (no process,
	// no RAM) once its state is written. It writes the whole machine, RAM included, to
	// dst.Machine alone (nothing shares a parked machine's pages), restored with RAM empty.
	Park(ctx context.Context, m Machine, dst SnapshotFiles) (Spec, SnapshotInfo, error)
}

// ErrNotSavable is wrapped by Saver.Save for a machine that cannot be saved.
var ErrNotSavable = errors.New("the machine cannot be saved")

// SnapshotFiles are the two files of a saved machine. A restored copy maps RAM copy-on-write
// (its writes are its own and never reach the file), so RAM must not change while a copy runs:
// a new snapshot is written beside it and renamed over it.
type SnapshotFiles struct {
	Machine string // the devices' state: qemu's migration stream without the guest's RAM
	// RAM is the guest's RAM, a sparse file of the machine's memory size; empty when Machine is
	// a parked machine's whole stream (Saver.Park), which a restore loads into its own memory.
	RAM string
	// Transient files are not synced to disk when written: they do not outlive the adapter
	// (a fork's, a paused sandbox's), so a host crash loses nothing they would have kept.
	Transient bool
}

// SnapshotInfo describes a snapshot Snapshotter.Snapshot made.
type SnapshotInfo struct {
	KernelRelease string        // the guest's `uname -r`
	Size          int64         // bytes of the files on disk (RAM's holes apart)
	Boot          time.Duration // booting the machine to a ready agent
	Warm          time.Duration // the caller's warm-up commands
	Save          time.Duration // stopping the machine and writing the file
	Paused        time.Duration // Saver.Save: how long the running machine was paused
}

// The file shares that serve a machine's image and mounts.
const (
	ShareVirtiofs = "virtiofs" // one virtiofsd per share (Linux)
	Share9P       = "9p"       // qemu's own virtio-9p server (macOS, where virtiofsd does not exist; Linux too)
)

// Spec describes one machine.
type Spec struct {
	RootFS   string   // host directory served read-only as the root filesystem
	CPUs     int      // vCPUs, at least 1
	MemoryMB int      // guest RAM in MiB, at least 128
	Env      []string // KEY=VALUE base environment of every exec
	Workdir  string   // default working directory inside the guest
	Mounts   []Mount  // extra host directories (VM workers); each must lie under a host root
	// Network gives the guest qemu's user-mode network: the outside (DNS and connections to
	// addresses that are not the host's loopback), never the host's loopback services, which
	// the gateway 10.0.2.2 would otherwise reach.
	Network bool
	// HostAccess lists the host's loopback addresses (IP and port) a guest with Network may
	// still reach through its gateway 10.0.2.2 (127.0.0.1:<port>): a VM worker's engine, where
	// it presents the project token. Sandboxes get none.
	HostAccess []netip.AddrPort
	// Egress narrows a guest with Network to what every one of these policies permits (the
	// operator's per-image policy and the creator's); none: the outside, as Network says.
	Egress   []*Egress
	StateDir string        // host directory owned by this machine (sockets, console log, disks)
	Deadline time.Duration // wall-clock bound on the machine's life; 0 means no bound
	// ScratchMB bounds the tmpfs upper layer that receives the guest's writes (with Disk, the
	// tmpfs /run and /tmp instead).
	ScratchMB int
	// Disk, when set, is a raw ext4 image attached as a virtio block device: the guest's writes
	// go to it instead of the tmpfs and outlive the machine (a VM worker's state disk). A full
	// disk fails the guest's writes with ENOSPC; an image made larger since it was formatted has
	// its file system grown to fill it when the guest mounts it.
	Disk string
	// RootDisk, when set, is a read-only ext4 image of the root served on virtio-blk instead of
	// RootFS over a file share: the root of a machine that can be snapshotted (qemu cannot
	// migrate a vhost-user-fs device). It takes no Mounts.
	RootDisk string
	// Hostname, when set, is the guest's host name.
	Hostname string
}

// Mount is a host directory made visible in the guest.
type Mount struct {
	Host     string
	Guest    string
	ReadOnly bool
}

// Machine is a booted VM.
type Machine interface {
	// Exec runs one command and waits for it (or for ctx / req.Timeout).
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// FS runs one fs::* operation in the guest. op is the operation name without prefix ("ls",
	// "write", ...); req and the reply are the JSON bodies of sandbox::fs::<op> minus
	// sandbox_id (req A4). A failure is returned as *FSError carrying its S21x code.
	FS(ctx context.Context, op string, req json.RawMessage) (json.RawMessage, error)
	// KernelRelease returns `uname -r` of the guest kernel.
	KernelRelease() string
	// PIDs returns the host process ids backing the machine (qemu, virtiofsd, ...).
	PIDs() []int
	// Stop ends the machine: a polite shutdown, then SIGKILL of every PID. Safe to call twice.
	Stop(ctx context.Context) error
	// Done is closed when the machine has exited for any reason.
	Done() <-chan struct{}
}

// Prestarter is a Machine that can start an interpreter ahead of its first use (the qemu
// driver's agent, revision 8): its start-up is then done, and the machine's next exec of a
// script with argv0 (`python3 file [args]`) forks it instead of starting one, when that exec's
// environment leaves the start-up as it was. Only Python's python3 is served.
type Prestarter interface {
	Prestart(ctx context.Context, argv0 string) error
}

// ExecRequest is one command in the guest.
type ExecRequest struct {
	Argv      []string      // argv[0] is resolved through PATH in the guest
	Env       []string      // KEY=VALUE, layered over Spec.Env for this call
	Stdin     []byte        // piped to stdin, then closed
	Workdir   string        // empty: Spec.Workdir, else "/"
	Timeout   time.Duration // the command is killed after it; TimedOut is then true
	OutputCap int           // bytes kept per stream; more is dropped and *Truncated set
	// Output, when set, receives the kept output as it arrives (stream 1 stdout, 2 stderr), in
	// addition to the collected result. It is called from one goroutine at a time.
	Output func(stream int, data []byte)
}

// ExecResult is what a command left behind. ExitCode is nil when it was killed by a signal.
type ExecResult struct {
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
	ExitCode        *int
	Signal          int // the signal that ended the command when ExitCode is nil (0 if unknown)
	TimedOut        bool
	Duration        time.Duration
}

// FSError is a file-operation failure with its sandbox code (S210–S217).
type FSError struct {
	Code    string
	Message string
	Fix     json.RawMessage // optional hint, e.g. {"parents":true}
}

func (e *FSError) Error() string { return e.Code + ": " + e.Message }
