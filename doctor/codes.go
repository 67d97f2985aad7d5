package doctor

import (
	composeerr "github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The codes `iii doctor` reports that no other command has. Findings that come from Compose, the
// engine or the adapter's host checks carry those modules' own codes (SANDBOX_CONFIG_MOVED,
// INVALID_COMPOSE_FILE, UNSUPPORTED_CONFIG_WORKERS, SANDBOX_ADAPTER_NOT_DECLARED,
// UNSUPPORTED_PLATFORM, KVM_ACCESS, LIBCAPNG_MISSING, FIRMWARE_MISSING, ...).
const (
	// LeftoverBinary: iii-worker or iii-init beside the iii that runs, or in ~/.local/bin (req I3).
	LeftoverBinary = "LEFTOVER_BINARY"
	// LeftoverPath: one of iii-worker's paths under ~/.iii that nothing reads (req J2).
	LeftoverPath = "LEFTOVER_PATH"
	// OldVMState: a 0.25 VM worker's <state dir>/vm/<key>/ that nothing reads (req J1).
	OldVMState = "OLD_VM_STATE"
	// SymlinkNotFollowed: a symbolic link on the path of a LEFTOVER_PATH or OLD_VM_STATE
	// candidate, below ~/.iii or the project's state directory; doctor reports the link and
	// neither reports nor moves what it leads to.
	SymlinkNotFollowed = "SYMLINK_NOT_FOLLOWED"
	// AdapterRange02: the adapter is declared or locked on 0.2 (req B7, B8, B9).
	AdapterRange02 = "ADAPTER_RANGE_0_2"
	// TokenExposed: a path:// VM worker under an adapter before 0.3.1 could read the token (req B10).
	TokenExposed = "TOKEN_EXPOSED"
	// PathShadow: the iii on PATH is not the one iii update installs (req I2).
	PathShadow = "PATH_SHADOW"
	// StoredSandboxEntry: the engine stores a configuration entry under iii-sandbox (req C3, C4).
	StoredSandboxEntry = "STORED_SANDBOX_ENTRY"
	// InvalidLock: worker-compose.lock does not parse; Compose's code, declared there.
	InvalidLock = composeerr.InvalidComposeLock
	// Usage: a bad command line (exit 2), the engine's code for it.
	Usage = errcode.Usage
)

// Severity says how much a finding matters: errors and warnings need action (exit 1), info does
// not.
type Severity string

// Severities.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
	Info    Severity = "info"
)
