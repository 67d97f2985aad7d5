//go:build !unix

package token

import "io/fs"

// noFollow is 0 where the OS has no O_NOFOLLOW; Check still refuses a link it sees with Lstat.
const noFollow = 0

// exposedMode is false where permission bits do not describe who may read a file (Windows).
func exposedMode(fs.FileMode) bool { return false }
