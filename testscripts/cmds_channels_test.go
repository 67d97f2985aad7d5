package testscripts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("chanwrite", cmdChanWrite)
	registerCmd("chanread", cmdChanRead)
	registerCmd("randfile", cmdRandFile)
	registerCmd("b64env", cmdB64Env)
}

// chanTimeout bounds one chanread, and a chanwrite stream nobody reads.
const chanTimeout = 60 * time.Second

// chanwrite [-abort=REASON] [-ref=REF] [-msg=TEXT] [-keep] FILE VAR: create a channel at
// $III_URL, write FILE into its write end in the background (then close it, or abort it with
// REASON), and set VAR to the read end's ref as compact JSON. -ref writes into the write ref REF
// (a JSON object, such as process::start's stdin) instead of a new channel, and sets VAR to it;
// -msg sends TEXT as a text message before the bytes (a process's {"type":"resize"}); -keep
// leaves the channel open after the bytes (no end-of-file). The writer ends with the script at
// the latest.
func cmdChanWrite(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("chanwrite", flag.ContinueOnError)
	abort := fs.String("abort", "", "")
	refJSON := fs.String("ref", "", "")
	msg := fs.String("msg", "", "")
	keep := fs.Bool("keep", false, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: chanwrite [-abort=REASON] [-ref=REF] [-msg=TEXT] [-keep] FILE VAR")
	}
	data, err := os.ReadFile(ts.MkAbs(fs.Arg(0)))
	ts.Check(err)
	url := ts.Getenv("III_URL")
	if url == "" {
		ts.Fatalf("chanwrite: III_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), chanTimeout)
	var out, wref protocol.ChannelRef
	if *refJSON != "" {
		if err := json.Unmarshal([]byte(*refJSON), &wref); err != nil {
			cancel()
			ts.Fatalf("chanwrite: -ref is not a channel ref: %v", err)
		}
		out = wref
	} else {
		w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "chanwrite", Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
		if err != nil {
			cancel()
			ts.Fatalf("chanwrite: %v", err)
		}
		out, wref, err = w.CreateChannel(ctx)
		w.Close()
		if err != nil {
			cancel()
			ts.Fatalf("chanwrite: %v", err)
		}
	}
	wr, err := protocol.DialWriter(ctx, url, wref)
	if err != nil {
		cancel()
		ts.Fatalf("chanwrite: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if *msg != "" {
			if err := wr.SendMessage(*msg); err != nil {
				return
			}
		}
		if _, err := wr.Write(data); err != nil {
			return
		}
		switch {
		case *abort != "":
			wr.Abort(*abort)
		case !*keep:
			wr.Close()
		}
	}()
	ts.Defer(func() { cancel(); <-done })
	b, _ := json.Marshal(out)
	ts.Setenv(fs.Arg(1), string(b))
}

// readOptions shape one chanread.
type readOptions struct {
	bytes int64          // > 0: stop after this many bytes
	until *regexp.Regexp // stop once the bytes read match it
	msgs  string         // write each text message as a line "OFFSET TEXT" (bytes read before it) here
}

// chanread [-key=KEY] [-bytes=N] [-until=REGEXP] [-msgs=FILE] REF OUTFILE: read the channel
// whose read ref is REF (a JSON object, or a file such as stdout holding one) from $III_URL into
// OUTFILE until the writer closes it; -key presents KEY instead of the ref's access_key. -bytes
// stops after N bytes and -until once the bytes read match REGEXP, then the reader leaves (the
// channel aborts); -msgs takes the channel's text messages apart into FILE, one line each,
// "OFFSET TEXT" with OFFSET the bytes read before it. A failure (refused ref, aborted channel)
// goes to stderr; ! chanread expects one.
func cmdChanRead(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("chanread", flag.ContinueOnError)
	key := fs.String("key", "", "")
	n := fs.Int64("bytes", 0, "")
	until := fs.String("until", "", "")
	msgs := fs.String("msgs", "", "")
	if fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: chanread [-key=KEY] [-bytes=N] [-until=REGEXP] [-msgs=FILE] REF OUTFILE")
	}
	src := fs.Arg(0)
	if !strings.HasPrefix(strings.TrimSpace(src), "{") {
		src = ts.ReadFile(src)
	}
	var ref protocol.ChannelRef
	if err := json.Unmarshal([]byte(src), &ref); err != nil {
		ts.Fatalf("chanread: %s is not a channel ref: %v", fs.Arg(0), err)
	}
	if *key != "" {
		ref.AccessKey = *key
	}
	opt := readOptions{bytes: *n}
	if *until != "" {
		re, err := regexp.Compile(*until)
		if err != nil {
			ts.Fatalf("chanread: -until: %v", err)
		}
		opt.until = re
	}
	if *msgs != "" {
		opt.msgs = ts.MkAbs(*msgs)
	}
	err := readChannel(ts.Getenv("III_URL"), ref, ts.MkAbs(fs.Arg(1)), opt)
	if err != nil {
		fmt.Fprintf(ts.Stderr(), "chanread: %v\n", err)
	}
	switch {
	case err != nil && !neg:
		ts.Fatalf("chanread: %v", err)
	case err == nil && neg:
		ts.Fatalf("chanread: the channel was read to its end")
	}
}

func readChannel(url string, ref protocol.ChannelRef, out string, opt readOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), chanTimeout)
	defer cancel()
	rd, err := protocol.DialReader(ctx, url, ref)
	if err != nil {
		return err
	}
	defer rd.Close()
	var got []byte
	var msgs bytes.Buffer
	if opt.msgs != "" {
		rd.OnMessage(func(m string) { fmt.Fprintf(&msgs, "%d %s\n", len(got), m) })
	}
	buf := make([]byte, 64<<10)
	for {
		k, rerr := rd.Read(buf)
		got = append(got, buf[:k]...)
		if opt.bytes > 0 && int64(len(got)) >= opt.bytes {
			got = got[:opt.bytes]
			break
		}
		if opt.until != nil && opt.until.Match(got) {
			break
		}
		if rerr == io.EOF {
			if opt.bytes > 0 || opt.until != nil {
				err = fmt.Errorf("the channel ended after %d bytes, before what -bytes or -until waits for", len(got))
			}
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	if werr := os.WriteFile(out, got, 0o644); err == nil {
		err = werr
	}
	if opt.msgs != "" {
		if werr := os.WriteFile(opt.msgs, msgs.Bytes(), 0o644); err == nil {
			err = werr
		}
	}
	return err
}

// randfile FILE SIZE: write SIZE random bytes to FILE.
func cmdRandFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: randfile FILE SIZE")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 {
		ts.Fatalf("randfile: bad size %q", args[1])
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
}

// b64env FILE VAR: set VAR to FILE's bytes in standard base64 (one argument holds at most
// 128 KiB, so keep FILE under 96 KiB when VAR goes on a command line).
func cmdB64Env(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: b64env FILE VAR")
	}
	b, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	ts.Setenv(args[1], base64.StdEncoding.EncodeToString(b))
}
