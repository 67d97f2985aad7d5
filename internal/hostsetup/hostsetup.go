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
	"strings"
)

// VM are the packages a sandbox microVM needs on the host, and what builds its firmware and
// preset images: qemu and virtiofsd, libcap-ng0 for virtiofsd, busybox, cpio and lz4.
var VM = []string{"qemu-system-x86", "qemu-system-common", "libcap-ng0", "busybox-static", "cpio", "lz4", "util-linux"}

// Test are the packages the end-to-end suite needs besides VM: the release checks (file,
// unzip), install.sh under dash with curl and wget, and shellcheck.
var Test = []string{"file", "unzip", "ca-certificates", "shellcheck", "dash", "curl", "wget"}

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

// Ensure installs the packages of pkgs that are missing, printing what it installs to log, and
// makes sure apt's package lists exist (the firmware and image builds download .deb files). A
// user other than root gets an error holding the one command to run instead.
func Ensure(pkgs []string, log io.Writer) error {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return fmt.Errorf("this host has no dpkg: install %s with your package manager, or use Debian 12", strings.Join(pkgs, " "))
	}
	missing := Missing(pkgs)
	lists, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*") // plain or compressed (.lz4, .gz)
	if len(missing) == 0 && len(lists) > 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return notRoot(missing)
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
func notRoot(missing []string) error {
	if len(missing) == 0 {
		return fmt.Errorf("apt has no package lists (the VM firmware and images are built from .deb files); run: sudo apt-get update")
	}
	return fmt.Errorf("missing Debian packages: %s; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends %s",
		strings.Join(missing, " "), strings.Join(missing, " "))
}

func run(log io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
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
