// Package hostsetup installs the Debian packages the demo and the test suite need, so that
// `go tool mage demo` and `go tool mage test` are the only set-up commands on a fresh Debian 12
// machine. As root it installs what is missing with apt-get, saying what; as another user it
// stops at once with the one command to run.
package hostsetup

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// VM are the packages a sandbox microVM needs on the host, and what builds its firmware and
// preset images: qemu and virtiofsd, libcap-ng0 for virtiofsd, e2fsprogs (mkfs.ext4 formats each
// VM worker's state disk and the root disks of image snapshots), busybox, cpio and lz4. The
// guests of the other architecture need Emulated besides.
var VM = []string{"qemu-system-x86", "qemu-system-common", "libcap-ng0", "e2fsprogs", "busybox-static", "cpio", "lz4", "util-linux"}

// Test are the packages the test suite needs besides VM: the release checks (file, unzip),
// install.sh under dash with curl and wget, shellcheck, and the C toolchain the race detector
// needs (gcc, libc6-dev).
var Test = []string{"file", "unzip", "ca-certificates", "shellcheck", "dash", "curl", "wget", "gcc", "libc6-dev"}

// Emulated returns what guests of the architecture this host does not have need (the adapter's
// guest_arch under emulation, which the test suite runs): the qemu package that runs them and
// Debian's name of their architecture, added to dpkg so that their firmware and preset images
// can be built from its packages.
func Emulated() (pkgs []string, debArch string) {
	if runtime.GOARCH == "arm64" {
		return []string{"qemu-system-x86"}, "amd64"
	}
	return []string{"qemu-system-arm"}, "arm64"
}

// MissingArches returns the Debian architectures of arches that dpkg does not list as foreign
// architectures.
func MissingArches(arches []string) []string {
	out, _ := exec.Command("dpkg", "--print-foreign-architectures").Output()
	have := strings.Fields(string(out))
	var missing []string
	for _, a := range arches {
		if !slices.Contains(have, a) {
			missing = append(missing, a)
		}
	}
	return missing
}

// listsFor reports whether apt has package lists of Debian architecture arch ("" any). apt may
// keep them compressed (Acquire::GzipIndexes: _Packages.lz4 and the like).
func listsFor(arch string) bool {
	pattern := "/var/lib/apt/lists/*_Packages*"
	if arch != "" {
		pattern = "/var/lib/apt/lists/*_binary-" + arch + "_Packages*"
	}
	lists, _ := filepath.Glob(pattern)
	return len(lists) > 0
}

// Missing returns the packages of pkgs that dpkg does not list as installed.
func Missing(pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// Ensure adds the foreign Debian architectures of arches that dpkg lacks, installs the packages
// of pkgs that are missing, printing what it does to log, and makes sure apt's package lists
// exist for every architecture (the firmware and image builds download .deb files). A user
// other than root gets an error holding the one command to run instead.
func Ensure(pkgs, arches []string, log io.Writer) error {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return fmt.Errorf("this host has no dpkg: install %s with your package manager, or use Debian 12", strings.Join(pkgs, " "))
	}
	missing := Missing(pkgs)
	newArches := MissingArches(arches)
	lists := listsFor("")
	for _, a := range arches {
		lists = lists && listsFor(a)
	}
	if len(missing) == 0 && len(newArches) == 0 && lists {
		return nil
	}
	if os.Geteuid() != 0 {
		return notRoot(missing, newArches)
	}
	for _, a := range newArches {
		fmt.Fprintf(log, "==> dpkg --add-architecture %s\n", a)
		if err := run(log, "dpkg", "--add-architecture", a); err != nil {
			return err
		}
	}
	fmt.Fprintln(log, "==> apt-get update")
	if err := run(log, "apt-get", "update", "-qq"); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(log, "==> installing Debian packages: %s\n", strings.Join(missing, " "))
	return run(log, "apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
}

// notRoot is the error of a user who cannot install: the one command that does it.
func notRoot(missing, arches []string) error {
	var cmds []string
	for _, a := range arches {
		cmds = append(cmds, "sudo dpkg --add-architecture "+a)
	}
	cmds = append(cmds, "sudo apt-get update")
	if len(missing) == 0 && len(arches) == 0 {
		return fmt.Errorf("apt has no package lists (the VM firmware and images are built from .deb files); run: sudo apt-get update")
	}
	what := []string{}
	if len(arches) > 0 {
		what = append(what, "Debian architectures: "+strings.Join(arches, " ")+" (the firmware and images of emulated guests)")
	}
	if len(missing) > 0 {
		what = append(what, "Debian packages: "+strings.Join(missing, " "))
		cmds = append(cmds, "sudo apt-get install -y --no-install-recommends "+strings.Join(missing, " "))
	}
	return fmt.Errorf("missing %s; run: %s", strings.Join(what, "; missing "), strings.Join(cmds, " && "))
}

func run(log io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	if len(out) > 0 && log != io.Discard {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		fmt.Fprintln(log, "    "+strings.Join(lines, "\n    "))
	}
	return nil
}

// Accelerator chooses the sandbox adapter's accelerator for the demo and the test suite, and
// says why: tcg (software emulation) where the KVM device ($III_KVM_DEVICE, else /dev/kvm) is
// absent, auto (KVM when a probe boot under it works, else tcg) where it exists.
func Accelerator() (accel, reason string) {
	dev := os.Getenv("III_KVM_DEVICE")
	if dev == "" {
		dev = "/dev/kvm"
	}
	if _, err := os.Stat(dev); err != nil {
		return "tcg", dev + " does not exist, so VMs run under software emulation (accelerator tcg)"
	}
	return "auto", dev + " exists, so the adapter uses KVM when a probe boot under it works, else software emulation (accelerator auto)"
}
