package proto

import "encoding/json"

// AgentVersion names this protocol revision; the host refuses an agent that sends another one
// (an initramfs built from older sources).
const AgentVersion = "iii-guest/10"

// Hello is the guest's first frame, sent once the control port is open.
type Hello struct {
	KernelRelease string `json:"kernel_release"`
	Agent         string `json:"agent"`
	UptimeMS      int64  `json:"uptime_ms,omitempty"`  // guest uptime when the port opened
	ModulesMS     int64  `json:"modules_ms,omitempty"` // time the agent spent loading modules
	InitMS        int64  `json:"init_ms,omitempty"`    // guest uptime when /init started (the kernel's boot)
}

// Init asks the guest to assemble its root: the share RootTag mounted read-only under a tmpfs
// upper layer of ScratchMB MiB, plus extra shares, then chroot into it. Every share is virtiofs,
// or virtio-9p when Share is Share9P (revision 4). With StateDisk (revision 7) the upper layer is
// the ext4 file system on the machine's virtio block device instead, kept across boots, and /run
// and /tmp are tmpfs of ScratchMB MiB.
type Init struct {
	RootTag   string       `json:"root_tag"`
	Share     string       `json:"share,omitempty"` // "" (virtiofs) or Share9P
	ScratchMB int          `json:"scratch_mb"`
	StateDisk bool         `json:"state_disk,omitempty"`
	Mounts    []GuestMount `json:"mounts,omitempty"`
	// Network configures the guest for qemu's user-mode network (10.0.2.15, gateway 10.0.2.2;
	// the host keeps the guest off its loopback services).
	Network bool `json:"network,omitempty"`
	// Entropy is random data from the host credited to the guest kernel's pool.
	Entropy []byte `json:"entropy,omitempty"`
	// Hostname, when set, is the guest's host name (revision 7).
	Hostname string `json:"hostname,omitempty"`
}

// StateDiskSerial is the virtio serial number of the block device Init.StateDisk refers to: the
// host sets it, the guest finds the disk by it whatever other block devices the machine has.
const StateDiskSerial = "iii-state"

// Share9P is Init.Share for shares served over virtio-9p.
const Share9P = "9p"

// ShareBlock is Init.Share for a root read from the first virtio-blk disk (a read-only ext4
// image, revision 6): the root of a machine that can be snapshotted, since qemu cannot migrate
// a vhost-user-fs device. It takes no extra mounts.
const ShareBlock = "blk"

// Resume is the first frame a machine restored from a snapshot receives (revision 7): every
// restored copy starts with the same memory, so the guest must get its own randomness, clock
// and name before it runs anything. The agent credits Entropy to the kernel's pool and forces a
// reseed of its generator, sets the wall clock to UnixNano and, when Hostname is set, the host
// name.
type Resume struct {
	Entropy  []byte `json:"entropy"`
	UnixNano int64  `json:"unix_nano"`
	Hostname string `json:"hostname,omitempty"`
}

// Resumed is the result of Resume's Reply from revision 9: the restored agent's version, so the
// host knows what a machine it did not boot speaks (an earlier agent's Reply has no result).
type Resumed struct {
	Agent string `json:"agent"`
}

// Prestart asks the agent (revision 8) to start the Python interpreter Argv0 and keep it waiting,
// its start-up done, for the machine's next exec of a script with it (`python3 file [args]`):
// that exec forks the waiting interpreter instead of starting one, if its environment leaves
// the interpreter's start-up as it was (see the agent's zygote.go); any other exec runs as
// usual. The interpreter serves one exec and is gone.
type Prestart struct {
	Argv0 string `json:"argv0"`
}

// GuestMount is a virtiofs tag mounted at Path inside the guest root.
type GuestMount struct {
	Tag      string `json:"tag"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only"`
}

// Reply answers Init, FS and Ping. Exactly one of Result and Error is set (neither for Init/Ping
// success).
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is a failure reported by the guest. Code is an S21x code for file operations and empty
// for other failures.
type Error struct {
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message"`
	Fix     json.RawMessage `json:"fix,omitempty"`
}

// Exec runs one command in the guest root.
type Exec struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Stdin     []byte   `json:"stdin,omitempty"`
	Workdir   string   `json:"workdir,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	OutputCap int      `json:"output_cap,omitempty"`
	// Stream asks for Output frames as output arrives, in addition to the collected result.
	Stream bool `json:"stream,omitempty"`
}

// Output is a chunk of a streamed exec's output.
type Output struct {
	Stream int    `json:"stream"` // 1 stdout, 2 stderr
	Data   []byte `json:"data"`
}

// ExecDone is the result of an exec.
type ExecDone struct {
	Stdout          []byte `json:"stdout,omitempty"`
	Stderr          []byte `json:"stderr,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	ExitCode        *int   `json:"exit_code,omitempty"`
	Signal          int    `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	DurationNS      int64  `json:"duration_ns"`
}

// Kill sends Signal to the process group of a running exec.
type Kill struct {
	Signal int `json:"signal"`
}

// FS is one fs::* operation; Op is the name without prefix and Request its JSON body. With
// Stream (revision 5) the file's bytes move as Data frames after it instead of inside it: for
// "write" the host sends them (the request carries no content), then an End, and the guest
// answers with a Reply once the file is written; for "read" the guest answers with a Reply
// holding {size, mode, mtime, body?}, then sends the file as Data frames and an End.
type FS struct {
	Op      string          `json:"op"`
	Request json.RawMessage `json:"request"`
	Stream  bool            `json:"stream,omitempty"`
}

// Marshal builds a frame whose payload is the JSON of v.
func Marshal(t Type, id uint32, v any) (Frame, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Frame{}, err
	}
	return Frame{Type: t, ID: id, Payload: b}, nil
}
