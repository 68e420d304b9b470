package isolation

import (
	"errors"
	"os"
	"strconv"
)

// ErrUnsafePath marks a refusal: the path crossed a symlink, left its root,
// crossed a mount where that is not allowed, or named something malformed.
// Callers count refusals with errors.Is(err, ErrUnsafePath).
var ErrUnsafePath = errors.New("unsafe path")

// ErrUnsupported is returned on systems other than Linux.
var ErrUnsupported = errors.New("not supported on this operating system")

// How says how OpenBeneath opens the last component.
type How struct {
	// Flags are open(2) flags for the last component; O_NOFOLLOW and
	// O_CLOEXEC are always added.
	Flags int
	// Mode is the permission for O_CREAT.
	Mode uint32
	// SameMount refuses a path that crosses a mount point below the root,
	// e.g. a disk.img that is itself a bind mount of a host file.
	SameMount bool
}

// FdPath names an open file through procfs. Handing this path to a syscall
// reaches exactly the object behind f, whatever happens to its name meanwhile.
func FdPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}
