package supervisor

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/iii-go/iii/internal/base/excerpt"
)

// Streams a log line can come from.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// MaxLineBytes is the longest line a log records as one entry; a longer one is split.
const MaxLineBytes = 16 << 10

// A worker's log holds one entry per line, "<stream> <message>": the stream is stdout or
// stderr, the message the line as the worker wrote it (without its newline). Each entry is
// written whole, so the two streams interleave line by line and a rotation never splits one.

// FormatLine renders one log entry.
func FormatLine(stream, message string) []byte {
	return []byte(stream + " " + message + "\n")
}

// ParseLine reads one log line (without its newline). A line in no known stream (written by
// hand, or by an older Compose) is a stdout message as it stands.
func ParseLine(line string) (stream, message string) {
	for _, s := range []string{StreamStdout, StreamStderr} {
		if strings.HasPrefix(line, s+" ") {
			return s, line[len(s)+1:]
		}
	}
	return StreamStdout, line
}

// LogTail returns the last n lines of the log at path as plain text (see PlainText), or "" when
// it cannot be read: the end of a worker's or the engine's log, quoted in an error message.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return PlainText(excerpt.Tail(string(b), n, 0))
}

// PlainText returns a log's text with the stream tags removed, for error messages that quote
// the end of a worker's log.
func PlainText(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		_, lines[i] = ParseLine(l)
	}
	return strings.Join(lines, "\n")
}

// lineWriter tags every complete line written to it with its stream and appends it to a
// shared log; Close flushes a last line that has no newline.
type lineWriter struct {
	stream string
	out    io.Writer
	mu     sync.Mutex
	buf    []byte
}

// NewLineWriter returns a writer that records what it is given as stream entries of out.
func NewLineWriter(stream string, out io.Writer) io.WriteCloser {
	return &lineWriter{stream: stream, out: out}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if err := w.emit(w.buf[:i]); err != nil {
			return len(b), err
		}
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) >= MaxLineBytes {
		if err := w.emit(w.buf[:MaxLineBytes]); err != nil {
			return len(b), err
		}
		w.buf = w.buf[MaxLineBytes:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
	return len(b), nil
}

func (w *lineWriter) emit(line []byte) error {
	line = bytes.TrimSuffix(line, []byte("\r"))
	for len(line) > MaxLineBytes {
		if _, err := w.out.Write(FormatLine(w.stream, string(line[:MaxLineBytes]))); err != nil {
			return err
		}
		line = line[MaxLineBytes:]
	}
	_, err := w.out.Write(FormatLine(w.stream, string(line)))
	return err
}

// Close writes a last unterminated line.
func (w *lineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return nil
	}
	err := w.emit(w.buf)
	w.buf = nil
	return err
}
