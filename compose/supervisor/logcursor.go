package supervisor

import (
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

// readLines returns the lines of g between from and g.size with the offset after each.
func readLines(g generation, from int64) ([]string, []int64, error) {
	if from >= g.size {
		return nil, nil, nil
	}
	b := make([]byte, g.size-from)
	if _, err := g.f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	var lines []string
	var ends []int64
	off := from
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(b[:i]))
		off += int64(i) + 1
		ends = append(ends, off)
		b = b[i+1:]
	}
	return lines, ends, nil
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
	var rev []Entry
	for i := len(gens) - 1; i >= 0 && len(rev) <= n; i-- {
		lines, _, err := readLines(gens[i], 0)
		if err != nil {
			return Page{}, err
		}
		for j := len(lines) - 1; j >= 0; j-- {
			s, m := ParseLine(lines[j])
			if !wanted(s, stream) {
				continue
			}
			rev = append(rev, Entry{Stream: s, Message: m})
			if len(rev) > n {
				break
			}
		}
	}
	if len(rev) > n {
		rev, page.Truncated = rev[:n], true
	}
	if len(gens) > 0 && gens[0].gen > 0 {
		page.Truncated = true // rotation already dropped the oldest generations
	}
	for i := len(rev) - 1; i >= 0; i-- {
		page.Entries = append(page.Entries, rev[i])
	}
	return page, nil
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
			from = min(c.Offset, gn.size)
		}
		lines, ends, err := readLines(gn, from)
		if err != nil {
			return Page{}, err
		}
		page.Cursor = Cursor{Generation: gn.gen, Offset: from}
		for j, l := range lines {
			if len(page.Entries) >= limit {
				page.More = true
				return page, nil
			}
			s, m := ParseLine(l)
			if wanted(s, stream) {
				page.Entries = append(page.Entries, Entry{Stream: s, Message: m})
			}
			page.Cursor.Offset = ends[j]
		}
		if gn.gen < g {
			// This generation is finished: continue at the start of the next one, so that a
			// later rotation of it does not look like a loss.
			page.Cursor = Cursor{Generation: gn.gen + 1}
		}
	}
	return page, nil
}
