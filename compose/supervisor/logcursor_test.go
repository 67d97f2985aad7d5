package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeLines appends n tagged lines "line <first+i>" to l, on stdout for even numbers and
// stderr for odd ones.
func writeLines(t *testing.T, l *RotatingLog, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		stream := StreamStdout
		if i%2 == 1 {
			stream = StreamStderr
		}
		if _, err := l.Write(FormatLine(stream, fmt.Sprintf("line %03d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

func messages(p Page) []string {
	out := make([]string, 0, len(p.Entries))
	for _, e := range p.Entries {
		out = append(out, e.Message)
	}
	return out
}

func want(first, n, step int) []string {
	out := []string{}
	for i := first; i < first+n; i += step {
		out = append(out, fmt.Sprintf("line %03d", i))
	}
	return out
}

func eq(t *testing.T, what string, got, wantv []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(wantv, ",") {
		t.Fatalf("%s = %v\nwant %v", what, got, wantv)
	}
}

// Each line is "stdout line 000\n" (16 bytes); 64-byte files hold 4 lines each.
func openSmall(t *testing.T) (string, *RotatingLog) {
	path := filepath.Join(t.TempDir(), "w.log")
	l, err := OpenLog(path, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return path, l
}

func TestCursorFollowsAcrossRotation(t *testing.T) {
	path, l := openSmall(t)
	p, err := ReadLog(path, 3, Cursor{}, 1000, "")
	if err != nil || len(p.Entries) != 0 || p.Cursor != (Cursor{}) || p.Truncated {
		t.Fatalf("empty log: %+v, %v", p, err)
	}
	c := p.Cursor
	var got []string
	// Read in batches while the writer rotates several times in between: every line once.
	for batch := 0; batch < 5; batch++ {
		writeLines(t, l, batch*6, 6)
		p, err := ReadLog(path, 3, c, 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		if p.Truncated {
			t.Fatalf("batch %d: truncated from %+v", batch, c)
		}
		got = append(got, messages(p)...)
		c = p.Cursor
	}
	eq(t, "followed", got, want(0, 30, 1))
	if c.Generation != readGen(path) || c.Generation < 5 {
		t.Fatalf("cursor %+v, active generation %d", c, readGen(path))
	}
	// Nothing new: the same cursor, no entries.
	p, _ = ReadLog(path, 3, c, 1000, "")
	if len(p.Entries) != 0 || p.Cursor != c {
		t.Fatalf("idle read: %+v", p)
	}
}

func TestCursorLimitAndFinishedGeneration(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 10) // generations 0 (4 lines), 1 (4 lines), 2 (2 lines)
	p, _ := ReadLog(path, 3, Cursor{}, 4, "")
	eq(t, "first page", messages(p), want(0, 4, 1))
	if !p.More || p.Cursor != (Cursor{Generation: 1}) {
		t.Fatalf("a page that ends a generation continues at the next one: %+v", p)
	}
	p, _ = ReadLog(path, 3, p.Cursor, 3, "")
	eq(t, "second page", messages(p), want(4, 3, 1))
	if !p.More || p.Cursor != (Cursor{Generation: 1, Offset: 48}) {
		t.Fatalf("cursor %+v", p.Cursor)
	}
	p, _ = ReadLog(path, 3, p.Cursor, 100, "")
	eq(t, "rest", messages(p), want(7, 3, 1))
	if p.More || p.Cursor != (Cursor{Generation: 2, Offset: 32}) {
		t.Fatalf("cursor %+v", p.Cursor)
	}
}

func TestCursorRotatedAwayIsTruncated(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 2)
	c := Cursor{Generation: 0, Offset: 16} // after line 000
	writeLines(t, l, 2, 30)                // generation 0 is long gone (3 archives kept)
	p, err := ReadLog(path, 3, c, 1000, "")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Truncated {
		t.Fatal("a cursor in a dropped generation must say truncated")
	}
	// It continues at the oldest line kept: 4 generations of 4 lines, the active one partial.
	got := messages(p)
	if got[len(got)-1] != "line 031" || len(got) > 16 {
		t.Fatalf("got %v", got)
	}
	if _, err := os.Stat(path + ".4"); !os.IsNotExist(err) {
		t.Fatalf("more archives than kept: %v", err)
	}
}

func TestCursorPastEndStartsOver(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 3)
	for _, c := range []Cursor{{Generation: 7}, {Generation: 0, Offset: 1000}} {
		p, _ := ReadLog(path, 3, c, 1000, "")
		if !p.Truncated {
			t.Fatalf("%+v: not truncated", c)
		}
		eq(t, "restarted", messages(p), want(0, 3, 1))
	}
}

func TestStreamFilterMovesCursorPastOthers(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 9)
	p, _ := ReadLog(path, 3, Cursor{}, 1000, StreamStderr)
	eq(t, "stderr", messages(p), want(1, 8, 2))
	for _, e := range p.Entries {
		if e.Stream != StreamStderr {
			t.Fatalf("entry %+v", e)
		}
	}
	end, _ := ReadLog(path, 3, Cursor{}, 1000, "")
	if p.Cursor != end.Cursor {
		t.Fatalf("filtered cursor %+v, end %+v", p.Cursor, end.Cursor)
	}
}

func TestTail(t *testing.T) {
	path, l := openSmall(t)
	p, err := TailLog(path, 3, 100, "")
	if err != nil || len(p.Entries) != 0 || p.Truncated {
		t.Fatalf("empty: %+v %v", p, err)
	}
	writeLines(t, l, 0, 10)
	p, _ = TailLog(path, 3, 5, "")
	eq(t, "tail 5", messages(p), want(5, 5, 1))
	if !p.Truncated {
		t.Fatal("tail that leaves lines out must say truncated")
	}
	end, _ := ReadLog(path, 3, Cursor{}, 1000, "")
	if p.Cursor != end.Cursor {
		t.Fatalf("tail cursor %+v, end %+v", p.Cursor, end.Cursor)
	}
	p, _ = TailLog(path, 3, 100, "")
	eq(t, "all", messages(p), want(0, 10, 1))
	if p.Truncated {
		t.Fatal("the whole log is not truncated")
	}
	p, _ = TailLog(path, 3, 2, StreamStdout)
	eq(t, "stdout tail", messages(p), []string{"line 006", "line 008"})
	// Nothing after the tail's cursor until more is written.
	q, _ := ReadLog(path, 3, p.Cursor, 1000, "")
	if len(q.Entries) != 0 {
		t.Fatalf("after tail: %v", messages(q))
	}
	writeLines(t, l, 10, 1)
	q, _ = ReadLog(path, 3, p.Cursor, 1000, "")
	eq(t, "after tail", messages(q), want(10, 1, 1))
}

func TestPartialLineIsNotRead(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 1)
	if _, err := l.Write([]byte("stdout half")); err != nil {
		t.Fatal(err)
	}
	p, _ := ReadLog(path, 3, Cursor{}, 100, "")
	eq(t, "complete", messages(p), want(0, 1, 1))
	l.Write([]byte(" done\n"))
	q, _ := ReadLog(path, 3, p.Cursor, 100, "")
	eq(t, "rest", messages(q), []string{"half done"})
}

func TestLineWriter(t *testing.T) {
	var b strings.Builder
	w := NewLineWriter(StreamStderr, &b)
	w.Write([]byte("a\nb"))
	w.Write([]byte("c\r\n"))
	w.Write([]byte(strings.Repeat("x", MaxLineBytes+3)))
	w.Close()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 4 || lines[0] != "stderr a" || lines[1] != "stderr bc" || len(lines[2]) != len("stderr ")+MaxLineBytes || lines[3] != "stderr xxx" {
		t.Fatalf("lines %q", lines)
	}
	if s, m := ParseLine("no tag here"); s != StreamStdout || m != "no tag here" {
		t.Fatalf("untagged: %s %s", s, m)
	}
}

// allocated is how many bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A hostile cursor (negative, or beyond what any log has) neither fails the read nor makes it
// allocate by its distance to the log: the read restarts at the oldest entry with truncated
// (an offset of -2^40 once had Compose allocate 1 TiB and die). Validate refuses them.
func TestHostileCursorsAllocateNothing(t *testing.T) {
	path, l := openSmall(t)
	writeLines(t, l, 0, 3)
	for _, c := range []Cursor{{0, -64 << 20}, {0, -1 << 40}, {-5, 0}, {-1, -1}, {0, 1<<63 - 1}, {1<<63 - 1, 5}} {
		var p Page
		var err error
		n := allocated(func() { p, err = ReadLog(path, 3, c, 1000, "") })
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if n > 1<<20 {
			t.Fatalf("%+v: the read allocated %d bytes", c, n)
		}
		if !p.Truncated {
			t.Fatalf("%+v: not truncated: %+v", c, p)
		}
		eq(t, fmt.Sprintf("%+v", c), messages(p), want(0, 3, 1))
		if c.Validate() == nil {
			t.Fatalf("%+v: Validate accepted it", c)
		}
	}
	if err := (Cursor{Generation: MaxCursorValue, Offset: MaxCursorValue}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// A huge line that something other than Compose put into a log is read in pieces of at most
// maxEntryBytes: neither ReadLog nor TailLog allocates by its length.
func TestHugeLineReadInPieces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	huge := "stdout " + strings.Repeat("x", 8<<20) + "\nstderr after\n"
	if err := os.WriteFile(path, []byte(huge), 0o600); err != nil {
		t.Fatal(err)
	}
	var p, tail Page
	var err, terr error
	n := allocated(func() { p, err = ReadLog(path, 3, Cursor{}, 2, "") })
	if err != nil || n > 1<<20 {
		t.Fatalf("ReadLog: %v, allocated %d bytes", err, n)
	}
	if len(p.Entries) != 2 || len(p.Entries[0].Message) != maxEntryBytes-len("stdout ") || !p.More || p.Cursor.Offset != 2*maxEntryBytes {
		t.Fatalf("ReadLog: %d entries, first %d bytes, more %v, cursor %+v", len(p.Entries), len(p.Entries[0].Message), p.More, p.Cursor)
	}
	n = allocated(func() { tail, terr = TailLog(path, 3, 2, "") })
	if terr != nil || n > 1<<20 {
		t.Fatalf("TailLog: %v, allocated %d bytes", terr, n)
	}
	if len(tail.Entries) != 2 || tail.Entries[1] != (Entry{StreamStderr, "after"}) || !tail.Truncated || tail.Cursor.Offset != int64(len(huge)) {
		t.Fatalf("TailLog: %+v", tail)
	}
	// Following with cursors reads the whole line, piece by piece, then the next.
	total, c := 0, Cursor{}
	for {
		q, err := ReadLog(path, 3, c, 100, StreamStdout)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range q.Entries {
			total += len(e.Message)
		}
		c = q.Cursor
		if !q.More {
			break
		}
	}
	if want := 8<<20 + (8<<20/maxEntryBytes)*len("stdout "); total < 8<<20 || total > want || c.Offset != int64(len(huge)) {
		t.Fatalf("followed %d message bytes to %+v", total, c)
	}
}
