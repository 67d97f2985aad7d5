// Package fspath answers questions about file paths as strings, without touching the file system.
package fspath

import (
	"path/filepath"
	"strings"
)

// Within reports whether path is root or lies below it, comparing the cleaned paths lexically
// (resolve symbolic links first where they matter). Both are absolute, or both relative.
func Within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
