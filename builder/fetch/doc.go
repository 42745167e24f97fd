// Package fetch gets the sources that recipes name and keeps them in a
// content-addressed cache, so that a build starts only from bytes whose
// digest the recipe pinned.
//
// It owns four source kinds, each in its own file with the same shape
// (a small request struct, a context, the cache, and Options):
//
//   - URL sources (url.go): http, https and file URLs tried in the order the
//     caller gives (mirrors first, upstream last). Transfers resume with HTTP
//     Range after a cut connection, retry with exponential backoff, and fall
//     back to the next URL. The sha256 is checked before a file enters the
//     cache; a mismatch is a *ChecksumError and leaves nothing behind.
//   - Distribution source packages (apt.go): `apt-get source --download-only`
//     run against a private apt configuration whose deb-src entries are
//     derived from the machine's deb entries. The system's /etc/apt is only
//     read, never written. The named file is then checked and cached like a
//     URL source.
//   - Git sources (git.go): a clone pinned by tag and commit. The digest of a
//     git source is its full 40-hex commit id, not a file hash: git already
//     addresses the tree by that id, and HEAD is checked against it after the
//     clone. The checkout (with submodules when asked, without .git) is kept
//     as a deterministic tar file under <cache>/git/<commit>.tar.
//   - Local directories (local.go): HashDir digests a tree by content
//     (names, exec bits, symlink targets, file bytes; never mtimes), so a
//     local source changes its digest exactly when its content changes.
//
// FetchURL, FetchApt and FetchGit return the cached file of a URLSpec,
// AptSpec or GitSpec; the recipe's source kind picks one (the builder's
// executor), and a plan pins each kind by its own digest. Options carries
// the knobs of all kinds (retries, backoff, progress, log, the git and
// apt-get binaries, the apt configuration directory). Progress is a
// channel of Updates; the package draws nothing itself.
//
// The cache (cache.go) may be shared by concurrent processes: every digest
// has a lock file, partial downloads live beside the cache and are renamed
// into place only after verification, so readers never see a half-written or
// unverified file.
package fetch
