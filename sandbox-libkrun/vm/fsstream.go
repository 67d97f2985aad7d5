package vm

import (
	"context"
	"encoding/json"
	"io"
)

// FSStreamer is a Machine that moves the bytes of fs::read and fs::write in bounded chunks
// instead of one frame holding the whole file (req A4).
type FSStreamer interface {
	// FSRead starts fs::read of req (the sandbox::fs::read body minus sandbox_id, req A4). head is the
	// reply without content: {size, mode, mtime, body?}; body yields the file's bytes, then
	// io.EOF, or an error when the guest aborts the stream. Closing body before its end
	// cancels the read in the guest. A guest failure before the stream starts is an *FSError;
	// a machine that exited fails with its driver's error, and an ended ctx with ctx's.
	FSRead(ctx context.Context, req json.RawMessage) (head json.RawMessage, body io.ReadCloser, err error)
	// FSWrite runs fs::write of req without content, the file's bytes read from body. When
	// reading body fails the write is abandoned (no file is left behind) and that error is
	// returned as it is; a guest failure is an *FSError.
	FSWrite(ctx context.Context, req json.RawMessage, body io.Reader) (json.RawMessage, error)
}
