//go:build unix

package release

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/updater/errcode"
)

// TestAssetThatIsNotARegularFile: a file:// tree whose asset is a link to /dev/zero is refused
// at once (DOWNLOAD_FAILED), instead of being read until the size limit.
func TestAssetThatIsNotARegularFile(t *testing.T) {
	root := tree(t)
	asset := filepath.Join(root, "iii", "v0.26.0", "iii-"+triple+".tar.gz")
	if err := os.Remove(asset); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", asset); err != nil {
		t.Fatal(err)
	}
	s := From("file://" + root)
	m, err := s.Manifest(context.Background(), "0.26.0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Find("iii", triple)
	data, err := s.Fetch(context.Background(), m.Version, a)
	if errcode.CodeOf(err) != errcode.DownloadFailed || !strings.Contains(err.Error(), "not a regular file") || data != nil {
		t.Errorf("asset linked to /dev/zero: %d bytes, %v; want %s naming a file that is not regular", len(data), err, errcode.DownloadFailed)
	}
}
