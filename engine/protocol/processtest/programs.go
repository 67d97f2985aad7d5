package processtest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
)

// Exit is the exit of a process that returned code.
func Exit(code int) protocol.ProcessExit { return protocol.ProcessExit{ExitCode: &code} }

// Killed is the exit of a process a signal ended.
func Killed(signal string) protocol.ProcessExit { return protocol.ProcessExit{Signal: signal} }

// Shell is a fake interactive shell for a process on a terminal: it prints the prompt "$ ",
// echoes what is typed as a terminal in cooked mode does (Enter ends a line, DEL erases), and
// runs a line: `echo WORDS`, `exit N`, `stty size` (the terminal's current size), `tty`,
// `printenv NAME`; anything else prints "sh: NAME: not found". Ctrl-D on an empty line exits 0;
// SIGHUP, SIGTERM or SIGKILL end it killed by that signal.
func Shell(p *Proc) protocol.ProcessExit {
	out := p.Stdout()
	input := make(chan []byte)
	go func() {
		defer close(input)
		for {
			b := make([]byte, 1024)
			n, err := p.Stdin.Read(b)
			if n > 0 {
				input <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	fmt.Fprint(out, "$ ")
	var line []byte
	for {
		select {
		case sig := <-p.Signals:
			switch protocol.SignalNumber(sig) {
			case 1, 9, 15:
				return Killed("SIG" + strings.TrimPrefix(strings.ToUpper(sig), "SIG"))
			}
		case b, ok := <-input:
			if !ok {
				return Exit(0)
			}
			for _, c := range b {
				switch c {
				case '\r', '\n':
					fmt.Fprint(out, "\r\n")
					if code, done := shellLine(p, out, string(line)); done {
						return Exit(code)
					}
					line = line[:0]
					fmt.Fprint(out, "$ ")
				case 0x7f, 0x08:
					if len(line) > 0 {
						line = line[:len(line)-1]
						fmt.Fprint(out, "\b \b")
					}
				case 0x04:
					if len(line) == 0 {
						return Exit(0)
					}
				default:
					line = append(line, c)
					_, _ = out.Write([]byte{c})
				}
			}
		}
	}
}

func shellLine(p *Proc, out interface{ Write([]byte) (int, error) }, line string) (int, bool) {
	words := strings.Fields(line)
	if len(words) == 0 {
		return 0, false
	}
	switch words[0] {
	case "exit":
		code := 0
		if len(words) > 1 {
			code, _ = strconv.Atoi(words[1])
		}
		return code, true
	case "echo":
		fmt.Fprintf(out, "%s\r\n", strings.Join(words[1:], " "))
	case "stty":
		size := p.Size()
		fmt.Fprintf(out, "%d %d\r\n", size.Rows, size.Cols)
	case "tty":
		fmt.Fprint(out, "/dev/pts/0\r\n")
	case "printenv":
		if len(words) > 1 {
			fmt.Fprintf(out, "%s\r\n", p.Env[words[1]])
		}
	default:
		fmt.Fprintf(out, "sh: %s: not found\r\n", words[0])
	}
	return 0, false
}

// Cat copies its stdin to its stdout and exits 0 at EOF.
func Cat(p *Proc) protocol.ProcessExit {
	b := make([]byte, 32<<10)
	for {
		n, err := p.Stdin.Read(b)
		if n > 0 {
			if _, werr := p.Stdout().Write(b[:n]); werr != nil {
				return Killed("SIGPIPE")
			}
		}
		if err != nil {
			return Exit(0)
		}
	}
}
