// Package lazyfs is a power-loss test filesystem, after Jepsen's LazyFS: a
// FUSE loopback over a backing directory that keeps what a disk would keep
// across a power cut, and nothing more. It is a test harness; product code
// must not import it.
//
// # Model
//
// Everything in the backing directory when Mount returns (and after each
// PowerLoss) is durable. After that, following POSIX (and, more strictly,
// what ext4 promises without its implementation accidents):
//
//   - A regular file's data (its bytes and its size) becomes durable only
//     when fsync or fdatasync is called on it, through any descriptor open
//     on the inode. On power loss a file reverts to its content at its last
//     fsync, or at mount, or to empty if it was created since mount and never
//     fsynced. Writes, truncates (including open with O_TRUNC) and fallocate
//     hole punching or zeroing made since are lost. fsync and fdatasync are
//     the same here.
//   - A directory's entries (names created by create, mknod, mkdir,
//     symlink, link, or rename into it; names removed by unlink, rmdir, or
//     rename out of it or over an existing name) become durable only when
//     that directory is fsynced. On power loss every directory's entries
//     revert to their state at its last fsync or at mount. Creating and
//     fsyncing a file does not make its name durable; fsyncing a new
//     directory does not make its own name durable in its parent, so a new
//     directory whose parent was not fsynced vanishes with all its contents.
//   - A rename is durable in the target directory when the target is
//     fsynced and in the source directory when the source is fsynced. If
//     only the target was fsynced, the file is in both after a power loss
//     (as hard links to one inode); if only the source was, it is in
//     neither. POSIX allows both, and LazyFS does the same. A directory can
//     have only one name: one durable in two places is kept at the first in
//     path order.
//   - Identity follows inodes: data durability belongs to the inode, so a
//     file renamed or linked elsewhere keeps its durable data, and an
//     unlinked file whose removal is not durable comes back with its durable
//     data. Regular files, symlinks and other non-directories keep their
//     inode across PowerLoss; directories are recreated.
//
// With Options.TornLastWrite, PowerLoss also keeps a prefix of the last
// unsynced WRITE request (the last write since its file's last fsync) on
// top of that file's durable content: a multiple of 512 bytes counted from
// the start of the write, chosen from Options.Seed, strictly between 0 and
// the write's length (half the write if it is at most 512 bytes). That
// models a torn multi-sector write. A write(2) larger than 128 KiB reaches
// the server as several WRITE requests; only the last one is torn.
//
// # What is not modelled
//
// Metadata other than entries and data is written through and survives
// every power loss: mode, owner, timestamps and xattrs changed on an inode
// keep their latest value (reverting data keeps the mtime and atime it
// had). Recreated directories get the mode, owner and times of the
// directory they replace, but not its xattrs. sync(2) and syncfs(2) reach no
// FUSE server and make nothing durable. A write on an O_SYNC or O_DSYNC
// descriptor makes the kernel send an fsync, which makes the whole file
// durable (more than O_DSYNC promises). Data written through shared
// writable mmap reaches the model when the kernel writes the pages back, so
// it counts as written then. copy_file_range is refused (ENOSYS) so that
// the kernel falls back to reads and writes; fallocate collapse and insert
// range are refused (EOPNOTSUPP). There is no reordering beyond the above:
// an fsync makes durable exactly what it covers, at once.
//
// # Mechanism
//
// The model is cheap in the size of files. Each file written since its last
// fsync has an undo log: its durable size and the durable bytes it has
// overwritten or truncated away since, each byte saved once; fsync drops
// the log. Each directory changed since its last fsync has a snapshot of
// its durable entries, taken at its first change; fsync drops it. Inodes
// unlinked, replaced or removed (directories) are kept in a stash directory
// next to the backing directory, so that no inode number is reused and
// every durable inode can be found. PowerLoss unmounts, applies the undo
// logs in place, builds a new tree from the durable entries of each
// directory by hard-linking the inodes, swaps it into the backing directory
// and mounts again. Its cost is the number of entries and of saved bytes,
// not the size of the files.
//
// The FUSE server runs in a child process (the test binary re-executed;
// this package's init serves it): mmap page faults on a mount served by the
// faulting process would deadlock the Go runtime. The child unmounts when
// its parent dies. Kernel attribute and entry caches have zero timeouts
// and there is no writeback cache: every write(2) reaches the server before
// it returns. Inotify works on the mount for changes made through it.
//
// # Use
//
// MountT mounts over temporary directories for a test and always unmounts.
// Call PowerLoss with every file on the mount closed (closing syncs
// nothing). Inject fails chosen operations with an errno, changing
// nothing, and counts them. Stats counts writes and fsyncs and what the
// last PowerLoss threw away.
package lazyfs
