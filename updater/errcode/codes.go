// Package errcode holds every error code the updater reports, one constant per code. The CLI
// prints them as error[CODE]: message on stderr.
package errcode

import "github.com/iii-go/iii/internal/base/errcode"

const (
	// InvalidArguments: a flag or argument of `iii update` is not understood; the engine's code,
	// declared there.
	InvalidArguments = errcode.InvalidArguments
	// UnknownTarget: `iii update TARGET` names a binary the running iii does not manage.
	UnknownTarget = "UNKNOWN_UPDATE_TARGET"
	// TargetRemoved: the target is a binary 0.26 no longer ships (iii-worker, iii-init).
	TargetRemoved = "UPDATE_TARGET_REMOVED"
	// ReleaseNotFound: the release tree has no such version, or its latest pointer is unreadable.
	ReleaseNotFound = "RELEASE_NOT_FOUND"
	// DownloadFailed: a file of the release tree could not be fetched.
	DownloadFailed = "DOWNLOAD_FAILED"
	// ChecksumMismatch: a downloaded asset's SHA-256 differs from the one the release publishes.
	ChecksumMismatch = "CHECKSUM_MISMATCH"
	// BadArchive: an asset is not a readable archive or does not hold the expected binary.
	BadArchive = "BAD_ARCHIVE"
	// BinaryCheckFailed: the new binary did not run `--version`, or printed another version; the
	// installed one was left in place.
	BinaryCheckFailed = "BINARY_CHECK_FAILED"
	// InstallFailed: the verified binary could not be written into the install directory.
	InstallFailed = "INSTALL_FAILED"
)
