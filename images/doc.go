// Package images assembles OCI images from install trees without a container
// daemon, using go-containerregistry.
//
// It owns every byte that goes into an image: one deterministic gzip layer per
// install tree (all merged under one prefix, so rebuilding one recipe changes
// one layer), a distroless-style base layer holding exactly the shared
// libraries the installed ELF files need (or a caller-chosen base image), an
// SPDX 2.3 SBOM layer, an optional model-repository layer, the image config
// and labels, and the outputs: an OCI image layout, a docker-loadable tarball
// or a registry push.
//
// Reproducibility is the central invariant: the same trees, options and
// SOURCE_DATE_EPOCH give the same manifest digest on any machine with the same
// host libraries. Layer tars are written by this package (sorted entries, fixed
// owners and times, no variable header fields) and compressed with a fixed
// gzip header, never through mutate.Time, which would hold whole layers in
// memory.
//
// What goes into a layer is what unpacking gives back:
//
//   - A name starting with ".wh." is refused (WhiteoutNameError): in an OCI
//     layer it is a whiteout, which deletes a path of the layers below
//     instead of adding a file, and the format cannot escape it.
//   - Install trees keep their symlinks. In the model repository, a
//     symlink that stays inside it is kept, and one leading out of it (an
//     absolute target or a relative one climbing out) is replaced by the
//     file or directory it leads to, as a symlinked repository itself is:
//     the image has nothing at the host paths it names. Several links to
//     one file carry its bytes once (tar hard links); a link dangling on
//     the host stays as it is; a directory link that contains itself is
//     an error.
//   - Every base gets /home/triton owned by 1000:1000, HOME in the image
//     and where the python backend keeps its cache: in the scratch base's
//     layer, or in a layer of its own ("home") on any other base.
//   - A tree file at the SBOM's path, or a file or symlink where its
//     directories go, is a ConflictError: the SBOM layer comes last and
//     would hide it.
//   - A gzip rootfs base may end in NUL padding, as GNU gzip accepts; its
//     layer keeps the gzip members and leaves the padding out (containerd
//     reads a layer to its end and would refuse it).
//
// Layers are cached (Options.CacheDir) under a fingerprint of their listing
// that includes each host file's inode and ctime, so a file rewritten with
// its old size and mtime is not mistaken for the old one, and a no-op
// rebuild reads no file contents.
package images
