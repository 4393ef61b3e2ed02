package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Program is the executable the ranks run.
type Program struct {
	Path  string // absolute; remote hosts must have a binary at the same path
	Built bool   // built from a package directory into a temporary directory (copied to remote hosts: copy.go)
}

// Remove deletes a built binary's temporary directory.
func (p *Program) Remove() {
	if p.Built {
		os.RemoveAll(filepath.Dir(p.Path))
	}
}

// ResolveProgram finds the executable for arg: a Go package directory is
// built once with `go build -o` into a temporary directory (with the
// compiler's output in the error if it fails), with the build tags given
// (and cgo on when there are any: the verbs device needs it); a file must
// be executable; a bare name is looked up in PATH, as a shell would.
func ResolveProgram(ctx context.Context, arg string, tags ...string) (*Program, error) {
	st, err := os.Stat(arg)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(arg, filepath.Separator) {
		if path, lerr := exec.LookPath(arg); lerr == nil {
			return &Program{Path: path}, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q not found: want a Go package directory, an executable, or a command in PATH", ErrProgram, arg)
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrProgram, arg, err)
	}
	if st.IsDir() {
		return build(ctx, arg, abs, tags)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("%w: %s is not an executable file (mode %v)", ErrProgram, arg, st.Mode())
	}
	return &Program{Path: abs}, nil
}

// build runs go build on the package in dir, with tags. The go command runs
// in its own process group, which cancelling ctx kills whole (go build's
// compilers and linker with it), and dies with gorun. A package that is not
// package main is refused: go build -o writes its archive, which cannot run.
func build(ctx context.Context, dir, abs string, tags []string) (*Program, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("%w: %s is a package directory but the go command is not in PATH to build it", ErrProgram, dir)
	}
	tmp, err := os.MkdirTemp("", "gorun-")
	if err != nil {
		return nil, fmt.Errorf("%w: temporary directory for the build: %v", ErrProgram, err)
	}
	out := filepath.Join(tmp, filepath.Base(abs))
	// Build from the package directory itself so that its module applies
	// whatever directory gorun runs in.
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, gocmd, append(args, ".")...)
	cmd.Dir = abs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	if len(tags) > 0 {
		// Without cgo -tags verbs would build the device's stub.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		how := "building " + dir
		if len(tags) > 0 {
			how += " with -tags " + strings.Join(tags, ",")
		}
		if slices.Contains(tags, "verbs") {
			how += " (the verbs device needs cgo: gcc and libibverbs' headers, apt-get install libibverbs-dev)"
		}
		return nil, fmt.Errorf("%w: %s failed (%v):\n%s", ErrProgram, how, err, strings.TrimRight(output.String(), "\n"))
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm()&0o111 == 0 {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("%w: %s is %s, not a main package: gorun runs a program", ErrProgram, dir, packageName(ctx, gocmd, abs))
	}
	return &Program{Path: out, Built: true}, nil
}

// packageName names the package in dir for messages: "package NAME", or
// "a library package" if go list cannot tell.
func packageName(ctx context.Context, gocmd, dir string) string {
	cmd := exec.CommandContext(ctx, gocmd, "list", "-f", "{{.Name}}", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if name := strings.TrimSpace(string(out)); err == nil && name != "" {
		return "package " + name
	}
	return "a library package"
}
