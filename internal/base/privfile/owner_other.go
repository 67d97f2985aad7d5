//go:build !unix

package privfile

import "io/fs"

// Windows has no Unix owner or mode bits; the home directory's ACL protects the files.
func ownedByUser(fs.FileInfo) bool { return true }

func exposed(fs.FileMode) bool { return false }
