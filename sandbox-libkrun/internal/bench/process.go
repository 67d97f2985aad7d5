package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// The targets of the process section.
const (
	firstByteTarget        = 10 * time.Millisecond // guest write to host read of the first byte
	streamBytes      int64 = 256 << 20             // output streamed by one process
	headBytes        int64 = 32 << 20              // output of busybox head, whose small copies bound it under TCG
	streamTarget           = 100.0                 // MB/s
	streamRSSTarget        = 64 << 20              // growth of this process's RSS while it streams
	backgroundProcs        = 64                    // detached processes in one sandbox, each re-attached once
	backgroundLines        = 200                   // lines each of them writes before it waits
	processReplyWait       = 2 * time.Minute
)

// processSection measures streamed exec on a python sandbox through the whole stack: the first
// byte of `sh -c 'echo x'` against the buffered sandbox::exec of the same command, the guest's
// write to the host's read (half an echo through `cat`), `head -c` and 256 MiB of `dd` through the
// stdout channel with the memory it costs, and backgroundProcs detached processes each
// re-attached once.
func processSection(ctx context.Context, d *qemu.Driver, n int) {
	cache := image.NewCache("")
	if _, ok := cache.RootFS(debimage.Presets[0].Ref); !ok {
		fmt.Printf("processes: skipped, image %s not cached (go tool mage images)\n", debimage.Presets[0].Ref)
		return
	}
	exitOn("bench: processes:", measureProcesses(ctx, d, n, cache))
}

func measureProcesses(ctx context.Context, d *qemu.Driver, n int, cache *image.Cache) error {
	st := settings.Defaults()
	st.AutoInstall = false
	st.ImageAllowlist = []string{"python"}
	s, err := startStack(ctx, d, st, cache)
	if err != nil {
		return err
	}
	defer s.close()
	id, stop, err := s.createPython(ctx, processReplyWait)
	if err != nil {
		return err
	}
	defer stop()

	var execT, firstT []time.Duration
	for i := 0; i < max(n, 3); i++ {
		t0 := time.Now()
		if _, err := s.client.Call(ctx, "sandbox::exec", map[string]any{"sandbox_id": id, "argv": []string{"sh", "-c", "echo x"}}, protocol.WithTimeout(processReplyWait)); err != nil {
			return fmt.Errorf("sandbox::exec: %w", err)
		}
		execT = append(execT, time.Since(t0))
		first, err := firstByte(ctx, s.client, id)
		if err != nil {
			return err
		}
		firstT = append(firstT, first)
	}
	gw, err := echoLatency(ctx, s.client, id)
	if err != nil {
		return err
	}
	ex, fb := median(execT), median(firstT)
	fmt.Printf("streamed exec on a python sandbox (client -> engine -> router -> adapter -> guest), %d runs each\n", len(execT))
	fmt.Printf("%-44s %v\n", "sandbox::exec sh -c 'echo x' (buffered):", ex)
	fmt.Printf("%-44s %v  (%.2fx the buffered exec)\n", "process::start sh -c 'echo x' to first byte:", fb, float64(fb)/float64(ex))
	fmt.Printf("%-44s %v  target %v: %s\n", "guest write to host read (half an echo):", gw, firstByteTarget, meets(gw <= firstByteTarget))

	mbs, _, err := streamLarge(ctx, s, id, []string{"head", "-c", strconv.FormatInt(headBytes, 10), "/dev/zero"}, headBytes)
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %.1f MB/s (busybox head's own copies bound it)\n", fmt.Sprintf("stdout of head -c %d MiB:", headBytes>>20), mbs)
	mbs, grow, err := streamLarge(ctx, s, id, []string{"dd", "if=/dev/zero", "bs=256k", "count=" + strconv.FormatInt(streamBytes/(256<<10), 10)}, streamBytes)
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %.1f MB/s  target %.0f MB/s: %s\n", fmt.Sprintf("stdout of dd, %d MiB:", streamBytes>>20), mbs, streamTarget, meets(mbs >= streamTarget))
	fmt.Printf("%-44s +%.1f MiB  target < %d MiB: %s\n", "RSS growth meanwhile (engine+adapter+client):", mib(grow), streamRSSTarget>>20, meets(grow < streamRSSTarget))

	el, lost, err := background(ctx, s.client, id)
	if err != nil {
		return err
	}
	fmt.Printf("%-44s %v, %d of %d lines lost: %s\n", fmt.Sprintf("%d detached processes, each re-attached:", backgroundProcs), el, lost, backgroundProcs*backgroundLines, meets(lost == 0))
	return nil
}

func meets(ok bool) string {
	if ok {
		return "meets the target"
	}
	return "MISSES the target"
}

func median(v []time.Duration) time.Duration {
	s := append([]time.Duration(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// started is the reply of process::start and process::attach.
type started struct {
	ProcessID string               `json:"process_id"`
	Stdout    *protocol.ChannelRef `json:"stdout"`
	Stderr    *protocol.ChannelRef `json:"stderr"`
}

// startProcess calls op (start or attach) and opens its stdout channel, whose text messages go
// to onMessage.
func startProcess(ctx context.Context, c *protocol.Worker, op string, req map[string]any, onMessage func(string)) (started, *protocol.ChannelReader, error) {
	raw, err := c.Call(ctx, "sandbox::process::"+op, req, protocol.WithTimeout(processReplyWait))
	if err != nil {
		return started{}, nil, fmt.Errorf("sandbox::process::%s: %w", op, err)
	}
	var st started
	if err := json.Unmarshal(raw, &st); err != nil || st.Stdout == nil {
		return started{}, nil, fmt.Errorf("sandbox::process::%s: unexpected reply %.200s", op, raw)
	}
	r, err := protocol.DialReader(ctx, c.URL(), *st.Stdout)
	if err != nil {
		return started{}, nil, err
	}
	r.OnMessage(onMessage)
	if st.Stderr != nil {
		// Nothing is written to stderr here; its channel is drained so that it closes.
		if er, err := protocol.DialReader(ctx, c.URL(), *st.Stderr); err == nil {
			go func() { _, _ = io.Copy(io.Discard, er); er.Close() }()
		}
	}
	return st, r, nil
}

// firstByte starts `sh -c 'echo x'` and returns the time from the call to its first byte.
func firstByte(ctx context.Context, c *protocol.Worker, id string) (time.Duration, error) {
	t0 := time.Now()
	_, r, err := startProcess(ctx, c, "start", map[string]any{"sandbox_id": id, "argv": []string{"sh", "-c", "echo x"}}, func(string) {})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	buf := make([]byte, 64)
	k, err := r.Read(buf)
	first := time.Since(t0)
	if err != nil && k == 0 {
		return 0, fmt.Errorf("first byte: %w", err)
	}
	_, _ = io.Copy(io.Discard, r)
	return first, nil
}

// echoRounds is how many bytes echoLatency sends through a process.
const echoRounds = 21

// echoLatency runs `cat` with a stdin channel and times echoRounds round trips of one byte (host
// to the process's stdin, the process's write back to the host's read). Half the median round
// trip bounds the time from the guest's write to the host's read without comparing two clocks.
func echoLatency(ctx context.Context, c *protocol.Worker, id string) (time.Duration, error) {
	raw, err := c.Call(ctx, "sandbox::process::start", map[string]any{"sandbox_id": id, "argv": []string{"cat"}, "stdin": true}, protocol.WithTimeout(processReplyWait))
	if err != nil {
		return 0, fmt.Errorf("sandbox::process::start cat: %w", err)
	}
	var st struct {
		started
		Stdin *protocol.ChannelRef `json:"stdin"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.Stdout == nil || st.Stdin == nil {
		return 0, fmt.Errorf("sandbox::process::start cat: unexpected reply %.200s", raw)
	}
	r, err := protocol.DialReader(ctx, c.URL(), *st.Stdout)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	r.OnMessage(func(string) {})
	if st.Stderr != nil {
		if er, err := protocol.DialReader(ctx, c.URL(), *st.Stderr); err == nil {
			go func() { _, _ = io.Copy(io.Discard, er); er.Close() }()
		}
	}
	w, err := protocol.DialWriter(ctx, c.URL(), *st.Stdin)
	if err != nil {
		return 0, err
	}
	var rtt []time.Duration
	b := make([]byte, 1)
	for range echoRounds {
		t0 := time.Now()
		if _, err := w.Write([]byte{'x'}); err != nil {
			return 0, fmt.Errorf("stdin of cat: %w", err)
		}
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, fmt.Errorf("stdout of cat: %w", err)
		}
		rtt = append(rtt, time.Since(t0))
	}
	_ = w.Close()
	_, _ = io.Copy(io.Discard, r)
	return median(rtt) / 2, nil
}

// streamLarge streams the size bytes argv writes to stdout and returns the throughput and the
// growth of this process's peak RSS meanwhile.
func streamLarge(ctx context.Context, s *stack, id string, argv []string, size int64) (float64, uint64, error) {
	runtime.GC()
	before := rssBytes("VmRSS:")
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux)
	var exit string
	var mu sync.Mutex
	t0 := time.Now()
	_, r, err := startProcess(ctx, s.client, "start", map[string]any{"sandbox_id": id, "argv": argv},
		func(m string) { mu.Lock(); exit = m; mu.Unlock() })
	if err != nil {
		return 0, 0, err
	}
	k, err := io.CopyBuffer(io.Discard, r, make([]byte, protocol.ChannelChunk))
	el := time.Since(t0)
	r.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("stdout of %s after %d bytes: %w", argv[0], k, err)
	}
	if k != size {
		return 0, 0, fmt.Errorf("stdout of %s: %d bytes, want %d", argv[0], k, size)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(exit, `"exit_code":0`) {
		return 0, 0, fmt.Errorf("stdout of %s: the last message is %q, want an exit with code 0", argv[0], exit)
	}
	peak := rssBytes("VmHWM:")
	return float64(size) / el.Seconds() / 1e6, peak - min(before, peak), nil
}

// rssBytes reads a kB field of /proc/self/status.
func rssBytes(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// background starts backgroundProcs detached processes that each write backgroundLines lines
// and a last "done" line, then wait; attaches to each once, reads up to its "done" and counts
// the lines missing; then kills them all. It returns the time all of it took.
func background(ctx context.Context, c *protocol.Worker, id string) (time.Duration, int, error) {
	t0 := time.Now()
	ids := make([]string, backgroundProcs)
	script := fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i of $P"; i=$((i+1)); done; echo done; exec sleep 600`, backgroundLines)
	for i := range ids {
		raw, err := c.Call(ctx, "sandbox::process::start", map[string]any{"sandbox_id": id, "argv": []string{"sh", "-c", script},
			"env": map[string]string{"P": strconv.Itoa(i)}, "detached": true}, protocol.WithTimeout(processReplyWait))
		if err != nil {
			return 0, 0, fmt.Errorf("process %d: sandbox::process::start: %w", i, err)
		}
		var st started
		if err := json.Unmarshal(raw, &st); err != nil || st.ProcessID == "" {
			return 0, 0, fmt.Errorf("process %d: unexpected reply %.200s", i, raw)
		}
		ids[i] = st.ProcessID
	}
	lost := 0
	for i, pid := range ids {
		_, r, err := startProcess(ctx, c, "attach", map[string]any{"sandbox_id": id, "process_id": pid}, func(string) {})
		if err != nil {
			return 0, 0, err
		}
		got := map[string]bool{}
		var line []byte
		buf := make([]byte, 4096)
	read:
		for {
			k, err := r.Read(buf)
			for _, b := range buf[:k] {
				if b != '\n' {
					line = append(line, b)
					continue
				}
				if string(line) == "done" {
					break read
				}
				got[string(line)] = true
				line = line[:0]
			}
			if err != nil {
				break
			}
		}
		r.Close()
		for j := 1; j <= backgroundLines; j++ {
			if !got[fmt.Sprintf("line %d of %d", j, i)] {
				lost++
			}
		}
	}
	el := time.Since(t0)
	for _, pid := range ids {
		_, _ = c.Call(ctx, "sandbox::process::signal", map[string]any{"sandbox_id": id, "process_id": pid, "signal": "SIGKILL"}, protocol.WithTimeout(time.Minute))
	}
	return el, lost, nil
}
