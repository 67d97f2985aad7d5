package qemu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// privateMapper maps the file path private as a restored machine's qemu maps its RAM, reads
// every page (as a save does), writes the first (as a guest does), says "ready" and waits for
// its input to close.
func privateMapper(path string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	st, err := f.Stat()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	var sum byte
	for i := 0; i < len(mem); i += os.Getpagesize() {
		sum += mem[i]
	}
	mem[0] = sum + 1
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return int(mem[0] - sum - 1)
}

// TestPageOutFile pages out the file pages a process holds of a file mapped private, all read,
// one written: the read pages (data and the sparse file's holes alike) leave it, the written
// copy stays.
func TestPageOutFile(t *testing.T) {
	const size = 8 << 20
	path := filepath.Join(t.TempDir(), "ram")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size/2)
	for i := range data {
		data[i] = byte(i)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Truncate(size) // the second half a hole
	}
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "III_PAGEOUT_MAPPER="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the mapper said %q (%v)", line, err)
	}
	pid := cmd.Process.Pid
	rss, anon := mappingMemory(t, pid, path)
	if rss < size/2 || anon == 0 {
		t.Fatalf("before: the mapping holds %d KiB, %d KiB of it written; want at least the %d KiB of data read and a page written", rss>>10, anon>>10, size>>11)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	n, err := pageOutFile(pidfd, pid, path)
	if err != nil {
		t.Fatal(err)
	}
	rss2, anon2 := mappingMemory(t, pid, path)
	t.Logf("paged out %d KiB: the mapping held %d KiB (%d KiB written), now %d KiB (%d KiB written)", n>>10, rss>>10, anon>>10, rss2>>10, anon2>>10)
	if anon2 != anon {
		t.Errorf("the written pages went from %d KiB to %d KiB; want them left alone", anon>>10, anon2>>10)
	}
	if rss2 > anon2+64<<10 {
		t.Errorf("after: the mapping holds %d KiB, %d KiB of it written; want little more than what was written", rss2>>10, anon2>>10)
	}
}

// mappingMemory reports the resident and anonymous bytes of pid's mapping of path, from its smaps.
func mappingMemory(t *testing.T, pid int, path string) (rss, anon int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	in := false
	found := false
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header line
			in = strings.HasSuffix(strings.TrimSpace(line), path)
			found = found || in
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			rss += kb << 10
		case "Anonymous:":
			anon += kb << 10
		}
	}
	if !found {
		t.Fatalf("no mapping of %s in the smaps of %d", path, pid)
	}
	return rss, anon
}
