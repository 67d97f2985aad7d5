package proto

// Long-lived processes (revision 9). ProcStart runs a command in its own process group and keeps
// it in the agent's table under an id ("p1", "p2", ...) until the machine ends: output it
// writes while no host reader is attached goes to a ring of RingBytes per stream, overwriting
// the oldest bytes (which are counted as dropped); while attached, the agent reads a pipe only
// under the stream's credit (stream.go), so a slow host blocks the process and nothing is
// lost. Every request is answered by a Reply whose Error.Code, when set, is one of the vm
// package's Process* codes.
//
// An attachment names three stream ids the host allocated (ProcStreams): the guest sends the
// process's stdout and stderr on the first two as Data frames, then, once both pipes reached
// their end and the process was reaped, a ProcExit frame on the stdout id and an empty End on
// both. An attachment that is detached (the host sent End on one of its output ids, or a new
// attachment took over) ends with an End whose payload says why, and no ProcExit. The host sends
// the process's input on the stdin id as Data frames under the window the guest grants; an
// empty End is end-of-file. A new attachment replays what the process wrote after the last byte
// the host credited on the one before it (or from the ring's start, Dropped counting the bytes
// lost), then goes on live.

// ProcStart starts a process; with Attach its output streams from the first byte, else it goes
// to the ring until a ProcAttach.
type ProcStart struct {
	Argv      []string  `json:"argv"`
	Env       []string  `json:"env,omitempty"`
	Workdir   string    `json:"workdir,omitempty"`
	TTY       *TermSize `json:"tty,omitempty"` // run on a pseudo-terminal: stdout carries it, stderr stays empty
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	RingBytes int       `json:"ring_bytes,omitempty"` // 0: the agent's default
	// Stdin gives the process a pipe as standard input that attachments write; without it (and
	// without TTY) its standard input is /dev/null.
	Stdin  bool         `json:"stdin,omitempty"`
	Attach *ProcStreams `json:"attach,omitempty"`
}

// TermSize is a terminal's window size in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ProcStreams are the stream ids of one attachment; Stdin is 0 when the host writes no input.
type ProcStreams struct {
	Stdout uint32 `json:"stdout"`
	Stderr uint32 `json:"stderr"`
	Stdin  uint32 `json:"stdin,omitempty"`
}

// ProcAttach attaches Streams to process ID, detaching the attachment it had.
type ProcAttach struct {
	ID      string      `json:"id"`
	Streams ProcStreams `json:"streams"`
}

// ProcAttached answers ProcAttach: the process and the bytes of each stream the ring lost
// before this attachment.
type ProcAttached struct {
	Process       ProcInfo `json:"process"`
	DroppedStdout int64    `json:"dropped_stdout,omitempty"`
	DroppedStderr int64    `json:"dropped_stderr,omitempty"`
}

// ProcInfo describes one process of the agent's table.
type ProcInfo struct {
	ID          string    `json:"id"`
	PID         int       `json:"pid"`
	Argv        []string  `json:"argv"`
	TTY         bool      `json:"tty,omitempty"`
	StartedAtMS int64     `json:"started_at_ms"` // Unix milliseconds by the guest's clock
	Exit        *ProcExit `json:"exit,omitempty"`
	Attached    bool      `json:"attached,omitempty"`
}

// ProcExit is how a process ended; ExitCode is nil when Signal ended it.
type ProcExit struct {
	ExitCode *int `json:"exit_code,omitempty"`
	Signal   int  `json:"signal,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
}

// ProcListed answers TypeProcList: the running processes and the exited ones still remembered.
type ProcListed struct {
	Processes []ProcInfo `json:"processes"`
}

// ProcRef names a process (TypeProcWait).
type ProcRef struct {
	ID string `json:"id"`
}

// ProcSignal sends Signal (1..64) to the process group of process ID.
type ProcSignal struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
}

// ProcResize sets the window size of process ID's terminal.
type ProcResize struct {
	ID   string   `json:"id"`
	Size TermSize `json:"size"`
}
