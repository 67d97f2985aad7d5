package supervisor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// Cursor is a position in a rotating log: a generation (how many rotations the active file had
// seen when it was written) and a byte offset in that generation. A cursor keeps its meaning
// across rotations: generation g lives in path.(G-g), where G is the active generation.
type Cursor struct {
	Generation int64 `json:"generation"`
	Offset     int64 `json:"offset"`
}

// MaxCursorValue is the largest generation or offset a cursor may hold: the largest integer a
// JSON number carries exactly (2^53-1), far beyond any log Compose writes.
const MaxCursorValue = 1<<53 - 1

// Validate reports a cursor no read can have returned: a generation or offset below 0 or above
// MaxCursorValue.
func (c Cursor) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"generation", c.Generation}, {"offset", c.Offset}} {
		if f.v < 0 || f.v > MaxCursorValue {
			return fmt.Errorf("%s=%d: write a number from 0 to %d, as a previous compose::logs reply gave it", f.name, f.v, int64(MaxCursorValue))
		}
	}
	return nil
}

// Entry is one line of a worker's log.
type Entry struct {
	Stream  string `json:"stream"`
	Message string `json:"message"`
}

// Page is what one read of a log returns.
type Page struct {
	Entries []Entry `json:"entries"`
	// Cursor is where the next read continues: just after the last entry read.
	Cursor Cursor `json:"cursor"`
	// Truncated says that entries before these exist or existed and are not in Entries: the
	// tail limit cut them, or rotation dropped them before the cursor's reader got them.
	Truncated bool `json:"truncated"`
	// More says that the limit stopped the read before the end of the log.
	More bool `json:"more,omitempty"`
}

// generation is one generation's file, opened.
type generation struct {
	gen  int64
	f    *os.File
	size int64 // bytes up to the last complete line
}

// openGenerations opens the active file and its archives as one consistent set, oldest first.
// A missing log is an empty set at generation readGen(path).
func openGenerations(path string, keep int) ([]generation, int64, error) {
	lk := rotationLock(path)
	lk.RLock()
	defer lk.RUnlock()
	g := readGen(path)
	var out []generation
	for i := keep; i >= 0; i-- {
		name := path
		if i > 0 {
			name = fmt.Sprintf("%s.%d", path, i)
		}
		if int64(i) > g {
			continue // no rotation has produced this archive yet (a leftover of an older log)
		}
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			closeAll(out)
			return nil, 0, err
		}
		out = append(out, generation{gen: g - int64(i), f: f})
	}
	for i := range out {
		size, err := completeSize(out[i].f)
		if err != nil {
			closeAll(out)
			return nil, 0, err
		}
		out[i].size = size
	}
	return out, g, nil
}

func closeAll(gs []generation) {
	for _, g := range gs {
		g.f.Close()
	}
}

// completeSize is the length of f up to and including its last newline: a line still being
// written is not read.
func completeSize(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	buf := make([]byte, 4096)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// maxEntryBytes bounds one line a read takes from a log: every line Compose writes (a stream tag
// and at most MaxLineBytes) fits; a longer one, put into the file by something else, is read
// in pieces of this size, each its own entry.
const maxEntryBytes = MaxLineBytes + 64

// scanLines calls fn with each line of g between from (clamped to [0, g.size]) and g.size,
// without its newline, and the offsets where it starts and just after it ends, until fn returns
// false. It reads through one buffer of maxEntryBytes, so neither the distance to the end nor a
// huge line makes it allocate more; line is valid only during the call.
func scanLines(g generation, from int64, fn func(line []byte, start, end int64) bool) error {
	from = min(max(from, 0), g.size)
	if from == g.size {
		return nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(g.f, from, g.size-from), maxEntryBytes)
	off := from
	for {
		b, err := r.ReadSlice('\n')
		if len(b) > 0 && (err == nil || errors.Is(err, bufio.ErrBufferFull)) {
			start := off
			off += int64(len(b))
			if !fn(bytes.TrimSuffix(b, []byte{'\n'}), start, off) {
				return nil
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil // the file ended early (truncated meanwhile), or on a piece without newline
		default:
			return err
		}
	}
}

// streamOf is the stream of a log line, as ParseLine reads it, without copying the line.
func streamOf(line []byte) string {
	if bytes.HasPrefix(line, []byte(StreamStderr+" ")) {
		return StreamStderr
	}
	return StreamStdout
}

func wanted(stream, filter string) bool { return filter == "" || stream == filter }

// TailLog returns the last n entries of the log at path (only those of stream, when stream is
// set) and the cursor at its end. A log that does not exist yet is empty.
func TailLog(path string, keep, n int, stream string) (Page, error) {
	gens, g, err := openGenerations(path, keep)
	if err != nil {
		return Page{}, err
	}
	defer closeAll(gens)
	page := Page{Entries: []Entry{}, Cursor: Cursor{Generation: g}}
	if len(gens) > 0 && gens[len(gens)-1].gen == g {
		page.Cursor.Offset = gens[len(gens)-1].size
	}
	// One entry more than n tells that earlier ones exist. Each generation, newest first, gives
	// its last wanted lines as spans; only the kept ones are read again.
	need := n + 1
	var spans [][]span // per generation, newest first
	found := 0
	for i := len(gens) - 1; i >= 0 && found < need; i-- {
		s, err := lastSpans(gens[i], need-found, stream)
		if err != nil {
			return Page{}, err
		}
		spans = append(spans, s)
		found += len(s)
	}
	skip := 0
	if found > n {
		skip, page.Truncated = found-n, true
	}
	if len(gens) > 0 && gens[0].gen > 0 {
		page.Truncated = true // rotation already dropped the oldest generations
	}
	for i := len(spans) - 1; i >= 0; i-- {
		gen := gens[len(gens)-1-i]
		for _, sp := range spans[i] {
			if skip > 0 {
				skip--
				continue
			}
			e, err := sp.read(gen)
			if err != nil {
				return Page{}, err
			}
			page.Entries = append(page.Entries, e)
		}
	}
	return page, nil
}

// span is where one line lies in a generation's file.
type span struct{ start, end int64 }

// read reads the entry at s back from g.
func (s span) read(g generation) (Entry, error) {
	b := make([]byte, s.end-s.start)
	if _, err := g.f.ReadAt(b, s.start); err != nil && !errors.Is(err, io.EOF) {
		return Entry{}, err
	}
	st, m := ParseLine(string(bytes.TrimSuffix(b, []byte{'\n'})))
	return Entry{Stream: st, Message: m}, nil
}

// lastSpans returns the spans of the last k lines of g (of stream, when set), oldest first.
func lastSpans(g generation, k int, stream string) ([]span, error) {
	ring := make([]span, 0, min(k, 1024))
	next := 0
	err := scanLines(g, 0, func(line []byte, start, end int64) bool {
		if !wanted(streamOf(line), stream) {
			return true
		}
		if len(ring) < k {
			ring = append(ring, span{start, end})
		} else {
			ring[next] = span{start, end}
			next = (next + 1) % k
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return append(ring[next:len(ring):len(ring)], ring[:next]...), nil
}

// ReadLog returns at most limit entries of the log at path after cursor c (only those of
// stream, when stream is set; the cursor moves past the others too) and the cursor after the
// last one read. A cursor whose generation rotation has dropped continues at the oldest
// generation kept, and a cursor past the end of the log (a log that was deleted) starts again
// at its beginning; both set Truncated.
func ReadLog(path string, keep int, c Cursor, limit int, stream string) (Page, error) {
	gens, g, err := openGenerations(path, keep)
	if err != nil {
		return Page{}, err
	}
	defer closeAll(gens)
	page := Page{Entries: []Entry{}, Cursor: Cursor{Generation: g}}
	if len(gens) == 0 {
		page.Truncated = c.Generation > g || (c.Generation == g && c.Offset > 0)
		return page, nil
	}
	oldest, active := gens[0], gens[len(gens)-1]
	switch {
	case c.Validate() != nil:
		c, page.Truncated = Cursor{Generation: oldest.gen}, true
	case c.Generation > g || (c.Generation == g && active.gen == g && c.Offset > active.size):
		c, page.Truncated = Cursor{Generation: oldest.gen}, true
	case c.Generation < oldest.gen:
		c, page.Truncated = Cursor{Generation: oldest.gen}, true
	}
	page.Cursor = c
	for _, gn := range gens {
		if gn.gen < c.Generation {
			continue
		}
		from := int64(0)
		if gn.gen == c.Generation {
			from = min(max(c.Offset, 0), gn.size)
		}
		page.Cursor = Cursor{Generation: gn.gen, Offset: from}
		full := false
		err := scanLines(gn, from, func(line []byte, _, end int64) bool {
			if len(page.Entries) >= limit {
				full = true
				return false
			}
			if s := streamOf(line); wanted(s, stream) {
				_, m := ParseLine(string(line))
				page.Entries = append(page.Entries, Entry{Stream: s, Message: m})
			}
			page.Cursor.Offset = end
			return true
		})
		if err != nil {
			return Page{}, err
		}
		if full {
			page.More = true
			return page, nil
		}
		if gn.gen < g {
			// This generation is finished: continue at the start of the next one, so that a
			// later rotation of it does not look like a loss.
			page.Cursor = Cursor{Generation: gn.gen + 1}
		}
	}
	return page, nil
}
