package vm

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"
)

// Processes is a Machine whose guest agent keeps long-lived processes: a process outlives the
// host's attachment to it (its output then goes to a bounded ring of recent bytes per stream),
// never its machine, and can be signalled, waited for and attached to again. The qemu driver's
// machines are Processes from agent revision 9.
type Processes interface {
	// StartProcess starts req and returns its record. With attach, the returned Attachment
	// receives the process's output from its first byte; without, the output goes to the ring
	// until AttachProcess and the Attachment is nil. The caller bounds how many processes a
	// machine runs; the agent's own bound (MaxGuestProcesses) is *ProcessError ProcessLimit.
	StartProcess(ctx context.Context, req ProcessRequest, attach *AttachOptions) (ProcessInfo, Attachment, error)
	// AttachProcess attaches to process id: the returned Attachment first yields what the
	// process wrote after the last byte an earlier attachment took (what is still in the ring;
	// Dropped says how much was lost when it overflowed), then the output as it is written. A
	// new attachment detaches the one before it. An unknown id is *ProcessError
	// ProcessNotFound; an exited process yields its ring and then its exit.
	AttachProcess(ctx context.Context, id string, opt AttachOptions) (Attachment, error)
	// ListProcesses lists the running processes and the exited ones still remembered.
	ListProcesses(ctx context.Context) ([]ProcessInfo, error)
	// SignalProcess sends sig to the process group of process id.
	SignalProcess(ctx context.Context, id string, sig syscall.Signal) error
	// WaitProcess waits until process id has exited (or ctx ends) and returns how.
	WaitProcess(ctx context.Context, id string) (ProcessExit, error)
	// ResizeProcess sets the window size of process id's terminal; ProcessNoTTY without one.
	ResizeProcess(ctx context.Context, id string, size TermSize) error
}

// ProcessRequest is one process to start in the guest.
type ProcessRequest struct {
	Argv    []string      // argv[0] is resolved through PATH in the guest
	Env     []string      // KEY=VALUE, layered over Spec.Env
	Workdir string        // empty: Spec.Workdir, else "/"
	TTY     *TermSize     // run on a pseudo-terminal of this size: its output is Stdout, Stderr stays empty
	Timeout time.Duration // the process group is killed after it (ProcessExit.TimedOut); 0: no bound
	// RingBytes bounds the output kept per stream for a later attachment; 0 is the agent's
	// default (DefaultRingBytes).
	RingBytes int
}

// DefaultRingBytes is the ring a process keeps per stream when its request names none.
const DefaultRingBytes = 1 << 20

// TermSize is a terminal's window size in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ProcessInfo describes one process of a machine.
type ProcessInfo struct {
	ID        string       // the guest's id for it, unique within the machine's life
	PID       int          // its pid in the guest
	Argv      []string     // as started
	TTY       bool         // runs on a pseudo-terminal
	StartedAt time.Time    // by the guest's clock
	Exit      *ProcessExit // nil while it runs
	Attached  bool         // a host attachment is reading its output
}

// ProcessExit is how a process ended. ExitCode is nil when a signal ended it.
type ProcessExit struct {
	ExitCode *int
	Signal   int // the signal that ended it when ExitCode is nil
	TimedOut bool
}

// AttachOptions shape an attachment.
type AttachOptions struct {
	Stdin bool // the attachment writes the process's standard input (its terminal with TTY)
}

// Attachment is one host reader of a process. Its streams are flow-controlled end to end: while
// the host does not read a stream, the guest stops reading that pipe and the process blocks on
// its writes; nothing is dropped while attached.
type Attachment interface {
	// Stdout and Stderr yield the process's output, then io.EOF once the process has exited
	// and its last byte was read; an error when the attachment was detached or the machine
	// went away.
	Stdout() io.Reader
	Stderr() io.Reader
	// Stdin writes the process's standard input; Close sends end-of-file. Nil unless asked.
	Stdin() io.WriteCloser
	// Dropped is the number of bytes of each stream that overflowed the ring before this
	// attachment and are lost to it.
	Dropped() (stdout, stderr int64)
	// Wait returns how the process ended, once both streams have reached io.EOF.
	Wait(ctx context.Context) (ProcessExit, error)
	// Detach ends the attachment: the process goes on, its output to the ring. Safe to call
	// twice and after the process exited.
	Detach()
}

// Process failures of the guest agent.
const (
	ProcessNotFound = "process_not_found" // no process of that id
	ProcessNoTTY    = "process_no_tty"    // resize of a process without a terminal
	ProcessExited   = "process_exited"    // signal to a process that has exited
	ProcessLimit    = "process_limit"     // MaxGuestProcesses are running
	ProcessNoStdin  = "process_no_stdin"  // an attach asked for the input of a process that has none
)

// MaxGuestProcesses is the most processes the guest agent runs at once, whatever the host asks;
// it also remembers at most this many exited ones (the oldest forgotten first).
const MaxGuestProcesses = 1024

// ProcessError is a process operation the guest refused; Code is one of the Process* codes.
type ProcessError struct {
	Code    string
	Message string
}

func (e *ProcessError) Error() string { return e.Message }

// ErrProcessesUnsupported is a machine whose guest agent predates processes (revision 9).
var ErrProcessesUnsupported = errors.New("the guest agent does not run processes (agent revision < 9)")
