// Package emulator provides the local DynamoDB, SQS and Secrets Manager
// for the tests and the local stack: scripts/emulator.py (moto's server,
// DynamoDB requests serialized under one lock) run from the project
// virtualenv, or, with EMULATOR=fakecloud, scripts/fakecloud.py (the
// fakecloud binary behind the same command line).
package emulator

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Environment variables scripts/emulator.py reads; see its docstring.
const (
	// EnvFastTransactions: "0" makes TransactWriteItems copy whole tables,
	// as moto does, instead of the items it names (the default).
	EnvFastTransactions = "EMULATOR_FAST_TRANSACTIONS"
	// EnvHonourRequestToken: "0" makes TransactWriteItems ignore its
	// ClientRequestToken, as moto does, instead of honouring it as
	// DynamoDB does (the default).
	EnvHonourRequestToken = "EMULATOR_HONOUR_REQUEST_TOKEN"
	// EnvIndexedQueries: "0" makes a Query list and sort every item of
	// the table, as moto does, instead of reading the partition it names
	// (the default).
	EnvIndexedQueries = "EMULATOR_INDEXED_QUERIES"
	// EnvGCFreeze: "0" leaves every object to Python's full garbage
	// collections, which then walk every stored item, instead of freezing
	// what survives every 1,024 DynamoDB requests (the default).
	EnvGCFreeze = "EMULATOR_GC_FREEZE"
	// EnvKind picks the emulator: "moto" (the default) or "fakecloud".
	// The four switches above are moto's; fakecloud has neither copy to
	// avoid nor a token to learn to honour.
	EnvKind = "EMULATOR"
)

// launchers maps an EnvKind value to its script under scripts/.
var launchers = map[string]string{"": "emulator.py", "moto": "emulator.py", "fakecloud": "fakecloud.py"}

// Emulator is a running scripts/emulator.py.
type Emulator struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	url    string
	exited chan struct{} // closed when the process has exited
	stderr *tail
}

// Start starts the emulator of the repository at root on 127.0.0.1:port (0
// picks a free port) and waits until it is ready. It exits when Stop closes
// its stdin, or when this process dies and the pipe closes with it. env
// ("KEY=VALUE") is added to the environment it inherits, e.g.
// EnvFastTransactions+"=0"; its EnvKind, else the inherited one, picks the
// emulator.
func Start(root string, port int, env ...string) (*Emulator, error) {
	return StartOn(root, "127.0.0.1", port, env...)
}

// StartOn is Start on host instead of loopback: `sam local`'s containers
// reach the emulator on the docker bridge's address.
func StartOn(root, host string, port int, env ...string) (*Emulator, error) {
	env = append(os.Environ(), env...)
	kind := kindOf(env)
	script, ok := launchers[kind]
	if !ok {
		return nil, fmt.Errorf("emulator: %s=%q: want moto or fakecloud", EnvKind, kind)
	}
	python := filepath.Join(root, ".venv", "bin", "python")
	cmd := exec.Command(python, filepath.Join(root, "scripts", script),
		"--host", host, "--port", strconv.Itoa(port), "--exit-with-stdin")
	cmd.Env = env
	// Its own process group: a Ctrl-C in the terminal reaches this process
	// only, which stops the emulator last, after what uses it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e := &Emulator{cmd: cmd, exited: make(chan struct{}), stderr: &tail{max: 8 << 10}}
	cmd.Stderr = e.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulator: start %s (run `make venv`): %w", python, err)
	}
	e.stdin = stdin
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- url
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(e.exited)
	}()
	select {
	case e.url = <-ready:
		return e, nil
	case <-e.exited:
		return nil, fmt.Errorf("emulator exited before it was ready: %s", strings.TrimSpace(e.stderr.String()))
	case <-time.After(60 * time.Second):
		_ = e.Stop()
		return nil, errors.New("emulator not ready after 60s")
	}
}

// kindOf is the last EnvKind setting in env, as the process would see it.
func kindOf(env []string) string {
	kind := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvKind+"="); ok {
			kind = v
		}
	}
	return kind
}

// URL is the endpoint of both DynamoDB and SQS.
func (e *Emulator) URL() string { return e.url }

// Exited is closed when the emulator process has exited.
func (e *Emulator) Exited() <-chan struct{} { return e.exited }

// Stop closes the emulator's stdin, which makes it exit, and waits for it;
// after five seconds it kills it.
func (e *Emulator) Stop() error {
	_ = e.stdin.Close()
	select {
	case <-e.exited:
		return nil
	case <-time.After(5 * time.Second):
	}
	if err := e.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("emulator: kill: %w", err)
	}
	<-e.exited
	return nil
}

// tail keeps the last max bytes written to it: the emulator's request log
// is not needed, only its last words if it fails.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
