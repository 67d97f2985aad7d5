package demo

import (
	"os"
	"path/filepath"
)

// ImageCacheDir is the adapter's image cache: $III_CACHE_DIR, else ~/.iii/cache.
func ImageCacheDir() string {
	if d := os.Getenv("III_CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".iii", "cache")
}
