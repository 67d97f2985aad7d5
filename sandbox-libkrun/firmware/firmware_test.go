package firmware

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
)

// literalBlock encodes data as one LZ4 block made of literals only (a valid, uncompressed block).
func literalBlock(data []byte) []byte {
	n := len(data)
	var b []byte
	if n < 15 {
		b = append(b, byte(n<<4))
	} else {
		b = append(b, 0xf0)
		for r := n - 15; ; r -= 255 {
			if r < 255 {
				b = append(b, byte(r))
				break
			}
			b = append(b, 255)
		}
	}
	return append(b, data...)
}

func legacyFrame(blocks ...[]byte) []byte {
	f := binary.LittleEndian.AppendUint32(nil, lz4LegacyMagic)
	for _, b := range blocks {
		f = binary.LittleEndian.AppendUint32(f, uint32(len(b)))
		f = append(f, b...)
	}
	return f
}

func TestLZ4(t *testing.T) {
	// "abcabcabcabc!": 3 literals, then a 9-byte match at offset 3, then "!" as final literals.
	block := []byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, '!'}
	got, err := DecodeLZ4Legacy(legacyFrame(block, literalBlock(bytes.Repeat([]byte("z"), 300))))
	if err != nil {
		t.Fatal(err)
	}
	if want := "abcabcabcabc!" + strings.Repeat("z", 300); string(got) != want {
		t.Fatalf("got %q", got)
	}
	// The kernel appends the uncompressed size: a trailing word shorter than a block is ignored.
	withTrailer := binary.LittleEndian.AppendUint32(legacyFrame(block), 313)
	if got, err := DecodeLZ4Legacy(withTrailer); err != nil || string(got) != "abcabcabcabc!" {
		t.Fatalf("with trailer: %q %v", got, err)
	}
	for _, bad := range [][]byte{
		{1, 2, 3, 4},
		legacyFrame([]byte{0x10, 'a', 9, 0, 0x00}), // offset beyond output
		legacyFrame([]byte{0xf0}),                  // truncated literal length
	} {
		if _, err := DecodeLZ4Legacy(bad); err == nil {
			t.Errorf("% x decoded", bad)
		}
	}
}

func TestExtractVmlinux(t *testing.T) {
	elf, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true to use as an ELF payload")
	}
	payload := binary.LittleEndian.AppendUint32(legacyFrame(literalBlock(elf)), uint32(len(elf)))
	const setupSects = 3
	img := make([]byte, (setupSects+1)*512)
	img[0x1f1] = setupSects
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint32(img[0x248:], 100)
	binary.LittleEndian.PutUint32(img[0x24c:], uint32(len(payload)))
	img = append(append(img, make([]byte, 100)...), payload...)
	got, err := ExtractVmlinux(img)
	if err != nil || !bytes.Equal(got, elf) {
		t.Fatalf("extract: %d bytes, %v", len(got), err)
	}
	if _, err := ExtractVmlinux(make([]byte, 4096)); err == nil {
		t.Fatal("a non-bzImage was accepted")
	}
}

func TestLoadOrder(t *testing.T) {
	idx := map[string]Module{
		"virtio_mmio": {Name: "virtio_mmio", Depends: []string{"virtio", "virtio_ring"}},
		"virtio":      {Name: "virtio", Depends: []string{"virtio_ring"}},
		"virtio_ring": {Name: "virtio_ring"},
		"virtiofs":    {Name: "virtiofs", Depends: []string{"fuse", "virtio", "virtio_ring"}},
		"fuse":        {Name: "fuse"},
		"a":           {Name: "a", Depends: []string{"b"}},
		"b":           {Name: "b", Depends: []string{"a"}},
	}
	mods, err := LoadOrder(idx, []string{"virtio-mmio", "virtiofs"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, " "); got != "virtio_ring virtio virtio_mmio fuse virtiofs" {
		t.Fatalf("order %q", got)
	}
	if _, err := LoadOrder(idx, []string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle: %v", err)
	}
	if _, err := LoadOrder(idx, []string{"nope"}); err == nil {
		t.Fatal("missing module accepted")
	}
}

func TestInitramfs(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("cpio not installed")
	}
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent")
	ko := filepath.Join(dir, "m.ko")
	if err := os.WriteFile(agent, []byte("#!agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ko, []byte("module"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := Initramfs(agent, []Module{{Name: "m", Path: ko}}, nil, nil, []Module{{Name: "m", Path: ko}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-t", "-v", "--quiet")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	for _, want := range []string{"crw-------", "dev/console", "-rwxr-xr-x", " init", "lib/modules/m.ko", "lib/modules/order", "lib/modules/order.net", "lib/modules/order.disk", "lib/modules/order.9p", "lib/modules/order.blk"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
	cmd = exec.Command("cpio", "-i", "--quiet", "--to-stdout", "lib/modules/order")
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.Output(); err != nil || string(out) != "m.ko\n" {
		t.Fatalf("order file %q %v", out, err)
	}
}

func FuzzDecodeLZ4(f *testing.F) {
	f.Add(legacyFrame([]byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, '!'}))
	f.Add(legacyFrame(literalBlock([]byte("hello"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeLZ4Legacy(data)
	})
}

func TestStripSignature(t *testing.T) {
	body := []byte("\x7fELF module body")
	sig := []byte("SIGNATURE")
	info := []byte{0, 0, 2, 0, 0, 0, 0, 0}
	info = binary.BigEndian.AppendUint32(info, uint32(len(sig)))
	signed := append(append(append(append([]byte(nil), body...), sig...), info...), moduleSigMagic...)
	if got := StripSignature(signed); !bytes.Equal(got, body) {
		t.Fatalf("stripped to %q", got)
	}
	if got := StripSignature(body); !bytes.Equal(got, body) {
		t.Fatalf("unsigned module changed to %q", got)
	}
}

func TestExtractARM64Image(t *testing.T) {
	img := make([]byte, 4096)
	copy(img, "MZ")
	binary.LittleEndian.PutUint32(img[0x38:], arm64Magic)
	got, err := ExtractARM64Image(img)
	if err != nil || !bytes.Equal(got, img) {
		t.Fatalf("plain Image: %v", err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(img)
	zw.Close()
	if got, err := ExtractARM64Image(gz.Bytes()); err != nil || !bytes.Equal(got, img) {
		t.Fatalf("gzip Image: %v", err)
	}
	if _, err := ExtractARM64Image(make([]byte, 4096)); err == nil || !strings.Contains(err.Error(), "not an arm64 Image") {
		t.Fatalf("no magic: %v", err)
	}
}

func TestDirsPerArch(t *testing.T) {
	getenv := func(k string) string { return map[string]string{"III_LIB_DIR": "/lib-dir"}[k] }
	host := guestarch.Host()
	other := guestarch.AArch64
	if host.Name == other.Name {
		other = guestarch.X86_64
	}
	if DirFor(getenv, host) != "/lib-dir" || BundleDirFor(host) != "firmware" {
		t.Fatalf("host arch: %s %s", DirFor(getenv, host), BundleDirFor(host))
	}
	if DirFor(getenv, other) != "/lib-dir/"+other.Name || BundleDirFor(other) != "firmware-"+other.Name {
		t.Fatalf("other arch: %s %s", DirFor(getenv, other), BundleDirFor(other))
	}
}

func TestManifestShares(t *testing.T) {
	old := Manifest{}
	if !old.Serves(ShareVirtiofs) || old.Serves(Share9P) || old.ArchOf() != "x86_64" {
		t.Fatalf("a manifest without arch and shares is an x86_64 virtiofs firmware")
	}
	arm := Manifest{Arch: "aarch64", Shares: []string{ShareVirtiofs, Share9P}}
	if !arm.Serves(Share9P) || arm.ArchOf() != "aarch64" {
		t.Fatalf("aarch64 manifest: %+v", arm)
	}
}

// A module the kernel builds in (ext4 in Debian's cloud-amd64 kernel) needs no file: the disk
// set leaves it out instead of failing, and modules.builtin's absence means none is built in.
func TestNotBuiltin(t *testing.T) {
	dir := t.TempDir()
	if b, err := readBuiltin(dir); err != nil || len(b) != 0 {
		t.Fatalf("no modules.builtin: %v, %v", b, err)
	}
	list := "kernel/fs/ext4/ext4.ko\nkernel/crypto/crc32c_generic.ko\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := readBuiltin(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(notBuiltin(DiskModules, b), " "); got != "virtio_blk" {
		t.Fatalf("disk modules to carry: %q", got)
	}
}
