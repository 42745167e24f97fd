package images

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// Defaults of Options.
const (
	DefaultPrefix  = "/opt/tritonserver"
	ModelsPath     = "/models"
	SBOMFile       = "share/sbom.spdx.json" // relative to the prefix
	DefaultUser    = "1000:1000"
	LabelPrefix    = "dev.tritonbuild.recipe." // + tree name = "<version>@<hash>"
	scratchBase    = "scratch"
	baseLayerLabel = "base-libraries"
	sbomLayerLabel = "sbom"
	modelsLabel    = "models"
	homeLabel      = "home"
	// homeDir is HOME in the image: the home of the user DefaultUser names.
	// The python backend keeps its stub files and extracted envs in the
	// user cache directory below it, so it must exist and be the user's.
	homeDir = "/home/triton"
)

// Options describe one image. Only Trees is required.
type Options struct {
	Trees []Tree
	// Prefix is where every tree is laid out in the image (DefaultPrefix).
	Prefix string
	// ModelRepository, when set, is a host directory copied to /models in
	// its own layer. Symlinks inside it that stay inside it are kept;
	// one leading out of it (an absolute target, or a relative one
	// climbing out) is replaced by a copy of the file or directory it
	// leads to, which the image would not have otherwise.
	ModelRepository string

	// Base is "" or "scratch" (an empty image plus a layer holding the host
	// shared libraries the trees need, /etc/passwd, /etc/group, /tmp and
	// the user's home /home/triton), a rootfs tarball (.tar or .tar.gz,
	// NUL padding after the gzip data accepted and left out), an OCI image
	// layout directory, or a registry reference. Only the scratch base
	// gets host libraries; on the others a small layer adds /home/triton
	// owned by 1000:1000, since HOME names it.
	Base string
	// Insecure allows plain HTTP for a registry Base.
	Insecure bool
	// Arch is the Go architecture of the image (runtime.GOARCH).
	Arch string

	// Epoch is SOURCE_DATE_EPOCH: every time in the image. Zero means
	// DefaultEpoch(Trees).
	Epoch time.Time

	Entrypoint []string // default [<Prefix>/bin/tritonserver]
	Cmd        []string // default [--model-repository=/models]
	Ports      []string // default 8000/tcp 8001/tcp 8002/tcp
	Env        []string // KEY=VALUE, applied after the defaults
	User       string   // default DefaultUser
	WorkingDir string   // default Prefix

	// Name, Version, Source and Revision fill the org.opencontainers.image
	// labels and name the SBOM.
	Name, Version, Source, Revision string
	// Labels are added to the config labels and the manifest annotations.
	Labels map[string]string

	// ExtraLibraries are host libraries (sonames or absolute paths) the
	// trees load with dlopen, added with their closure to a scratch base.
	ExtraLibraries []string
	// HostPaths are host files or directories copied into a scratch base at
	// their host paths, with the shared libraries their ELF files need:
	// what the trees execute without linking it, e.g. "/usr/bin/python3"
	// and "/usr/lib/python3.11" for the python backend.
	HostPaths []string
	// AllowMissingLibraries turns unresolved DT_NEEDED entries from an
	// error into Summary.MissingLibraries.
	AllowMissingLibraries bool

	// CacheDir keeps written layers keyed by a fingerprint of their content
	// listing (names, modes, sizes, and each host file's path, inode, mtime
	// and ctime), so assembling an unchanged tree again reuses its layer
	// without reading it. A layer whose files changed less than two seconds
	// before waits that long before it is written, so that no later change
	// can keep the metadata it is recorded under. When empty, layers go to
	// a temporary directory removed by Assembly.Close.
	CacheDir string
	// CompressionLevel is the gzip level (gzip.DefaultCompression when 0).
	CompressionLevel int
	// Jobs bounds how many layers are written at once (runtime.NumCPU()).
	Jobs int
	// Progress, when set, receives progress of layer writing. Calls are
	// serialized.
	Progress ProgressFunc
}

// Progress is one progress report: Done of Total bytes of the named item
// (a layer name or digest) in a stage ("layer", "write", "push").
type Progress struct {
	Stage       string
	Name        string
	Done, Total int64
}

// ProgressFunc receives progress reports.
type ProgressFunc func(Progress)

// Assembly is an assembled image whose layers live in files on disk. The
// image is valid until Close; write it out before closing.
type Assembly struct {
	Image   v1.Image
	Summary Summary
	scratch string // temporary layer directory, removed by Close
}

// Close removes temporary layer files (cached layers stay).
func (a *Assembly) Close() error {
	if a == nil || a.scratch == "" {
		return nil
	}
	err := os.RemoveAll(a.scratch)
	a.scratch = ""
	return err
}

// Summary are the facts about an assembled image worth printing.
type Summary struct {
	Digest           v1.Hash // manifest digest
	ConfigDigest     v1.Hash
	Epoch            time.Time
	CompressedSize   int64 // manifest + config + layers as stored in a registry
	UncompressedSize int64 // sum of the layers' tar sizes (known for layers written here)
	Layers           []LayerSummary
	BaseLibraries    []string      // host files copied into the base-libraries layer
	HostPackages     []HostPackage // distribution packages owning them (listed in the SBOM)
	LibraryPath      []string      // LD_LIBRARY_PATH of the image
	MissingLibraries []MissingLibrary
}

// LayerSummary describes one layer. Name is a tree name, "base-libraries",
// "home" (on a base other than scratch), "sbom", "models", or "base:<n>"
// for the layers of a base image.
type LayerSummary struct {
	Name             string
	Digest, DiffID   v1.Hash
	Size             int64
	UncompressedSize int64 // 0 when the layer came from a base image
	Cached           bool  // reused from Options.CacheDir
}

// LayerDigest returns the digest of the layer named name.
func (s Summary) LayerDigest(name string) (v1.Hash, bool) {
	for _, l := range s.Layers {
		if l.Name == name {
			return l.Digest, true
		}
	}
	return v1.Hash{}, false
}

// String renders the summary for a terminal.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "image %s\n", s.Digest)
	fmt.Fprintf(&b, "  created %s, %s compressed, %s uncompressed, %d layers\n",
		s.Epoch.UTC().Format(time.RFC3339), humanBytes(s.CompressedSize), humanBytes(s.UncompressedSize), len(s.Layers))
	for _, l := range s.Layers {
		c := ""
		if l.Cached {
			c = " (cached)"
		}
		fmt.Fprintf(&b, "  %-24s %s %10s%s\n", l.Name, l.Digest.Hex[:12], humanBytes(l.Size), c)
	}
	return b.String()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ConflictError reports a path installed by two trees.
type ConflictError struct {
	Path          string
	First, Second string // tree names
}

func (e *ConflictError) Error() string {
	if e.Second == sbomLayerLabel {
		return fmt.Sprintf("%s is installed by %q, in the way of the image's SBOM (<prefix>/%s, written in a layer after the trees, which would hide it)", e.Path, e.First, SBOMFile)
	}
	return fmt.Sprintf("%s is installed by both %q and %q", e.Path, e.First, e.Second)
}

// normalize fills defaults and checks the options.
func (o *Options) normalize() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !path.IsAbs(o.Prefix) || path.Clean(o.Prefix) == "/" {
		return fmt.Errorf("prefix %q: want an absolute directory below /", o.Prefix)
	}
	o.Prefix = path.Clean(o.Prefix)
	if c := whiteoutComponent(o.Prefix); c != "" {
		return fmt.Errorf("prefix %q: %q starts with %q, which an OCI layer reserves for whiteouts", o.Prefix, c, whiteoutPrefix)
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Epoch.IsZero() {
		o.Epoch = DefaultEpoch(o.Trees)
	}
	if o.Epoch.Unix() < 0 {
		return fmt.Errorf("epoch %s is before 1970", o.Epoch)
	}
	o.Epoch = o.Epoch.UTC().Truncate(time.Second)
	if o.Entrypoint == nil {
		o.Entrypoint = []string{o.Prefix + "/bin/tritonserver"}
	}
	if o.Cmd == nil {
		o.Cmd = []string{"--model-repository=" + ModelsPath}
	}
	if o.Ports == nil {
		o.Ports = []string{"8000/tcp", "8001/tcp", "8002/tcp"}
	}
	if o.User == "" {
		o.User = DefaultUser
	}
	if o.WorkingDir == "" {
		o.WorkingDir = o.Prefix
	}
	if o.Name == "" {
		o.Name = "tritonserver"
	}
	if o.CompressionLevel == 0 {
		o.CompressionLevel = gzip.DefaultCompression
	}
	if o.CompressionLevel < gzip.HuffmanOnly || o.CompressionLevel > gzip.BestCompression {
		return fmt.Errorf("compression level %d: want -2..9", o.CompressionLevel)
	}
	if o.Jobs <= 0 {
		o.Jobs = runtime.NumCPU()
	}
	if o.Base == "" {
		o.Base = scratchBase
	}
	names := map[string]bool{}
	for i, t := range o.Trees {
		if t.Name == "" {
			return fmt.Errorf("tree %d (%s): no name", i, t.Dir)
		}
		if names[t.Name] {
			return fmt.Errorf("tree %q given twice", t.Name)
		}
		names[t.Name] = true
		switch t.Name {
		case baseLayerLabel, sbomLayerLabel, modelsLabel, homeLabel:
			return fmt.Errorf("tree name %q is reserved for a layer of its own", t.Name)
		}
		st, err := os.Stat(t.Dir)
		if err != nil {
			return fmt.Errorf("tree %q: %w", t.Name, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("tree %q: %s is not a directory", t.Name, t.Dir)
		}
	}
	if o.ModelRepository != "" {
		st, err := os.Stat(o.ModelRepository)
		if err != nil {
			return fmt.Errorf("model repository: %w", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("model repository: %s is not a directory", o.ModelRepository)
		}
	}
	for _, p := range o.Ports {
		if !strings.Contains(p, "/") {
			return fmt.Errorf("port %q: want NUMBER/PROTOCOL, e.g. 8000/tcp", p)
		}
	}
	return nil
}

// Assemble builds the image described by o. Layer files are written (or
// reused from o.CacheDir) before it returns; nothing is pushed or written
// elsewhere. Close the Assembly when done with the image.
func Assemble(ctx context.Context, o Options) (_ *Assembly, err error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	asm := &Assembly{}
	defer func() {
		if err != nil {
			asm.Close()
		}
	}()
	store := &layerStore{}
	if o.CacheDir != "" {
		if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("layer cache: %w", err)
		}
		store.dir, store.cache = o.CacheDir, true
	} else {
		dir, err := os.MkdirTemp("", "tritonbuild-layers-")
		if err != nil {
			return nil, fmt.Errorf("layer directory: %w", err)
		}
		asm.scratch, store.dir = dir, dir
	}

	// List every tree, merging them into one view of the prefix.
	prefixName := cleanImagePath(o.Prefix)
	treeSpecs := make([]*layerSpec, len(o.Trees))
	fsys := &imageFS{prefix: o.Prefix, tree: map[string]entry{}}
	owner := map[string]string{}    // non-directory path -> tree
	dirOwner := map[string]string{} // directory path -> first tree
	for i, t := range o.Trees {
		entries, err := walkDir(t.Dir, prefixName, false)
		if err != nil {
			return nil, fmt.Errorf("tree %q: %w", t.Name, err)
		}
		treeSpecs[i] = &layerSpec{label: t.Name, entries: entries}
		for _, e := range entries {
			p := "/" + e.name
			// A directory in one tree and a file or symlink in another
			// conflict too: the later layer would hide the other.
			if e.typ == tar.TypeDir {
				if first, ok := owner[p]; ok {
					return nil, &ConflictError{Path: p, First: first, Second: t.Name}
				}
				if _, ok := fsys.tree[p]; !ok {
					fsys.tree[p] = e
					dirOwner[p] = t.Name
				}
				continue
			}
			if first, ok := owner[p]; ok {
				return nil, &ConflictError{Path: p, First: first, Second: t.Name}
			}
			if first, ok := dirOwner[p]; ok {
				return nil, &ConflictError{Path: p, First: first, Second: t.Name}
			}
			owner[p] = t.Name
			fsys.tree[p] = e
		}
	}
	// The SBOM layer comes after the trees: a tree's own file at its
	// path, or a file or symlink where its directories go, would be
	// hidden or replaced without a word.
	sbomPath := path.Join(o.Prefix, SBOMFile)
	for p := sbomPath; p != o.Prefix; p = path.Dir(p) {
		first, ok := owner[p]
		if !ok && p == sbomPath {
			first, ok = dirOwner[p]
		}
		if ok {
			return nil, &ConflictError{Path: p, First: first, Second: sbomLayerLabel}
		}
	}

	base, err := loadBase(ctx, &o, store)
	if err != nil {
		return nil, err
	}
	libPath := []string{o.Prefix + "/lib"}
	var specs []*layerSpec
	var labels []string
	var baseFiles []string
	var missing []MissingLibrary
	var hostPkgs []HostPackage
	if base.scratch {
		t, err := elfTargetFor(o.Arch)
		if err != nil {
			return nil, err
		}
		hostDirs, err := HostLibraryDirs(o.Arch)
		if err != nil {
			return nil, err
		}
		c, err := resolveClosure(closureOptions{target: t, fsys: fsys, hostDirs: hostDirs, libraryPath: libPath, extra: o.ExtraLibraries, hostPaths: o.HostPaths})
		if err != nil {
			return nil, err
		}
		if err := checkEntrypoint(fsys, o, c); err != nil {
			return nil, err
		}
		if len(c.missing) > 0 && !o.AllowMissingLibraries {
			return nil, &MissingLibrariesError{Missing: c.missing}
		}
		missing = c.missing
		libPath = append(libPath, c.libDirs...)
		spec, err := baseLayerSpec(c)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
		labels = append(labels, "tritonbuild: base libraries, users and /tmp")
		baseFiles = c.files
		if hostPkgs, err = hostPackages(ctx, c.files); err != nil {
			return nil, err
		}
	} else {
		// HOME names the user's home, which a base image need not have:
		// without it the python backend cannot create its cache there
		// and no python model loads. A base's own /home/triton keeps
		// its content; the layer sets its owner and mode.
		specs = append(specs, &layerSpec{label: homeLabel, entries: homeEntries()})
		labels = append(labels, "tritonbuild: "+homeDir+" for user "+DefaultUser)
	}
	for i, s := range treeSpecs {
		t := o.Trees[i]
		specs = append(specs, s)
		labels = append(labels, fmt.Sprintf("tritonbuild: install %s %s (%s)", t.Name, t.Version, t.Hash))
	}
	sbom, err := SBOM(o.Trees, SBOMOptions{Name: o.Name, Version: o.Version, Epoch: o.Epoch, HostPackages: hostPkgs, Distro: hostDistro()})
	if err != nil {
		return nil, err
	}
	sbomName := path.Join(prefixName, SBOMFile)
	sbomSpec := &layerSpec{label: sbomLayerLabel, entries: append(parentDirs(sbomName),
		entry{name: sbomName, typ: tar.TypeReg, mode: 0o644, size: int64(len(sbom)), data: sbom})}
	specs = append(specs, sbomSpec)
	labels = append(labels, "tritonbuild: SPDX SBOM at "+path.Join(o.Prefix, SBOMFile))
	if o.ModelRepository != "" {
		entries, err := walkDir(o.ModelRepository, cleanImagePath(ModelsPath), true)
		if err != nil {
			return nil, fmt.Errorf("model repository: %w", err)
		}
		specs = append(specs, &layerSpec{label: modelsLabel, entries: entries})
		labels = append(labels, "tritonbuild: model repository at "+ModelsPath)
	}

	// Write the layers, several at a time: gzip is the bottleneck and
	// layers are independent.
	layers := make([]*fileLayer, len(specs))
	cached := make([]bool, len(specs))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Jobs)
	for i, s := range specs {
		var report func(done, total int64)
		if o.Progress != nil {
			report = func(done, total int64) {
				mu.Lock()
				defer mu.Unlock()
				o.Progress(Progress{Stage: "layer", Name: s.label, Done: done, Total: total})
			}
		}
		g.Go(func() error {
			l, c, err := store.layer(gctx, s, o.Epoch, o.CompressionLevel, report)
			layers[i], cached[i] = l, c
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	img, sum, err := compose(&o, base, specs, layers, cached, labels, libPath)
	if err != nil {
		return nil, err
	}
	sum.BaseLibraries = baseFiles
	sum.HostPackages = hostPkgs
	sum.MissingLibraries = missing
	asm.Image, asm.Summary = img, sum
	return asm, nil
}

// checkEntrypoint makes sure a scratch image can start: its entrypoint must
// be a file of the trees (absolute, or found in <prefix>/bin), or a host
// file the base layer carries (Options.HostPaths) through host symlinks it
// carries too. fsys answers for the host outside the prefix, so a path
// that merely exists on the host is not enough.
func checkEntrypoint(fsys *imageFS, o Options, c *closure) error {
	if len(o.Entrypoint) == 0 {
		return nil
	}
	ep := o.Entrypoint[0]
	cands := []string{ep}
	if !path.IsAbs(ep) {
		cands = []string{path.Join(o.Prefix, "bin", ep)}
	}
	inImage := func(p string) bool {
		return strings.HasPrefix(p, fsys.prefix+"/")
	}
	carried := map[string]bool{}
	for _, f := range c.files {
		carried[f] = true
	}
	for _, l := range c.links {
		carried[l.name] = true
	}
	for _, cand := range cands {
		final, _, links, ok := fsys.resolve(cand)
		if !ok || (!inImage(final) && !carried[final]) {
			continue
		}
		for _, l := range links {
			if !inImage(l.name) && !carried[l.name] {
				ok = false
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("entrypoint %q: not found in the install trees or the host paths the image carries (looked for %s)", ep, strings.Join(cands, ", "))
}

// baseLayerSpec lays out the distroless-style base: the closure's host
// files and symlinks at their host paths, a passwd and group file with the
// unprivileged user 1000, its home, a world-writable sticky /tmp and the
// model repository mount points /models and /mnt/models.
func baseLayerSpec(c *closure) (*layerSpec, error) {
	passwd := []byte("root:x:0:0:root:/root:/sbin/nologin\ntriton:x:1000:1000:triton:" + homeDir + ":/sbin/nologin\n")
	group := []byte("root:x:0:\ntriton:x:1000:\n")
	// These come first: finishEntries keeps the first of equal names, so
	// host files below /tmp or /home/triton cannot turn these directories
	// into plain ones, nor a host /etc/passwd replace the users.
	entries := []entry{
		{name: "etc", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, size: int64(len(passwd)), data: passwd},
		{name: "etc/group", typ: tar.TypeReg, mode: 0o644, size: int64(len(group)), data: group},
	}
	entries = append(entries, homeEntries()...)
	entries = append(entries, []entry{
		{name: "root", typ: tar.TypeDir, mode: 0o700},
		{name: "tmp", typ: tar.TypeDir, mode: 0o1777},
		// The model repository paths of Triton's guides and of KServe
		// (which mounts the model at /mnt/models), there to mount over.
		{name: "models", typ: tar.TypeDir, mode: 0o755},
		{name: "mnt", typ: tar.TypeDir, mode: 0o755},
		{name: "mnt/models", typ: tar.TypeDir, mode: 0o755},
	}...)
	for _, d := range c.dirs {
		name := cleanImagePath(d)
		if err := checkName(d, name); err != nil {
			return nil, fmt.Errorf("base libraries: %w", err)
		}
		entries = append(entries, parentDirs(name)...)
		entries = append(entries, entry{name: name, typ: tar.TypeDir, mode: 0o755})
	}
	for _, f := range c.files {
		st, err := os.Lstat(f)
		if err != nil {
			return nil, fmt.Errorf("base libraries: %w", err)
		}
		e, err := entryFromInfo(f, cleanImagePath(f), st)
		if err != nil {
			return nil, fmt.Errorf("base libraries: %w", err)
		}
		entries = append(entries, parentDirs(e.name)...)
		entries = append(entries, e)
	}
	for _, l := range c.links {
		name := cleanImagePath(l.name)
		if err := checkName(l.name, name); err != nil {
			return nil, fmt.Errorf("base libraries: %w", err)
		}
		entries = append(entries, parentDirs(name)...)
		entries = append(entries, entry{name: name, typ: tar.TypeSymlink, mode: 0o777, link: l.target})
	}
	return &layerSpec{label: baseLayerLabel, entries: finishEntries(entries)}, nil
}

// homeEntries are the user's home directory and its parent, owned as
// /etc/passwd of the scratch base says (user 1000, group 1000).
func homeEntries() []entry {
	name := cleanImagePath(homeDir)
	return append(parentDirs(name), entry{name: name, typ: tar.TypeDir, mode: 0o755, uid: 1000, gid: 1000})
}

// compose stacks the base and the written layers into the final image and
// fills its config, labels and annotations.
func compose(o *Options, base *baseImage, specs []*layerSpec, layers []*fileLayer, cached []bool, created []string, libPath []string) (v1.Image, Summary, error) {
	var sum Summary
	sum.Epoch = o.Epoch
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg := &v1.ConfigFile{}
	if base.config != nil {
		cfg = base.config.DeepCopy()
	}
	cfg.RootFS = v1.RootFS{Type: "layers"}
	var adds []mutate.Addendum
	for i, l := range base.layers {
		d, err := l.Digest()
		if err != nil {
			return nil, sum, fmt.Errorf("base image layer %d: %w", i, err)
		}
		diff, err := l.DiffID()
		if err != nil {
			return nil, sum, fmt.Errorf("base image layer %d: %w", i, err)
		}
		size, err := l.Size()
		if err != nil {
			return nil, sum, fmt.Errorf("base image layer %d: %w", i, err)
		}
		adds = append(adds, mutate.Addendum{Layer: l})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diff)
		sum.Layers = append(sum.Layers, LayerSummary{Name: fmt.Sprintf("base:%d", i), Digest: d, DiffID: diff, Size: size, UncompressedSize: base.usizes[i]})
		sum.UncompressedSize += base.usizes[i]
	}
	// A rootfs tarball comes without a config, and some images carry no
	// history: record their layers, so that the history entries line up
	// with the layers for `docker history` and builders.
	recorded := 0
	for _, h := range cfg.History {
		if !h.EmptyLayer {
			recorded++
		}
	}
	for ; recorded < len(base.layers); recorded++ {
		cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: o.Epoch}, CreatedBy: "tritonbuild: base layer"})
	}
	for i, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.info.DiffID)
		cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: o.Epoch}, CreatedBy: created[i]})
		sum.Layers = append(sum.Layers, LayerSummary{Name: specs[i].label, Digest: l.info.Digest, DiffID: l.info.DiffID, Size: l.info.Size, UncompressedSize: l.info.USize, Cached: cached[i]})
		sum.UncompressedSize += l.info.USize
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, sum, err
	}

	cfg.Architecture = o.Arch
	cfg.OS = "linux"
	cfg.Created = v1.Time{Time: o.Epoch}
	cfg.Config.Entrypoint = o.Entrypoint
	cfg.Config.Cmd = o.Cmd
	cfg.Config.User = o.User
	cfg.Config.WorkingDir = o.WorkingDir
	if cfg.Config.ExposedPorts == nil {
		cfg.Config.ExposedPorts = map[string]struct{}{}
	}
	for _, p := range o.Ports {
		cfg.Config.ExposedPorts[p] = struct{}{}
	}
	cfg.Config.Env = mergeEnv(cfg.Config.Env, append([]string{
		"PATH=" + o.Prefix + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LD_LIBRARY_PATH=" + strings.Join(libPath, ":"),
		"TRITON_SERVER_HOME=" + o.Prefix,
		"HOME=" + homeDir,
	}, o.Env...))
	labels := imageLabels(o, base)
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	for k, v := range labels {
		cfg.Config.Labels[k] = v
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, sum, err
	}
	img = mutate.Annotations(img, labels).(v1.Image)

	if sum.Digest, err = img.Digest(); err != nil {
		return nil, sum, err
	}
	if sum.ConfigDigest, err = img.ConfigName(); err != nil {
		return nil, sum, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, sum, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, sum, err
	}
	sum.CompressedSize = int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		sum.CompressedSize += l.Size
	}
	sum.LibraryPath = libPath
	return img, sum, nil
}

// imageLabels are the OCI labels plus one pin per recipe.
func imageLabels(o *Options, base *baseImage) map[string]string {
	created := o.Epoch.UTC().Format(time.RFC3339)
	labels := map[string]string{
		"org.opencontainers.image.created": created,
		"org.opencontainers.image.title":   o.Name,
	}
	set := func(k, v string) {
		if v != "" {
			labels[k] = v
		}
	}
	set("org.opencontainers.image.version", o.Version)
	set("org.opencontainers.image.source", o.Source)
	set("org.opencontainers.image.revision", o.Revision)
	if base.ref != "" {
		set("org.opencontainers.image.base.name", base.ref)
		set("org.opencontainers.image.base.digest", base.digest)
	}
	for _, t := range o.Trees {
		labels[LabelPrefix+t.Name] = t.Version + "@" + t.Hash
	}
	for k, v := range o.Labels {
		labels[k] = v
	}
	return labels
}

// mergeEnv overrides base's KEY=VALUE entries with set's, keeping base's
// order and appending new keys in the order given.
func mergeEnv(base, set []string) []string {
	key := func(kv string) string { k, _, _ := strings.Cut(kv, "="); return k }
	out := append([]string(nil), base...)
	idx := map[string]int{}
	for i, kv := range out {
		idx[key(kv)] = i
	}
	for _, kv := range set {
		if i, ok := idx[key(kv)]; ok {
			out[i] = kv
			continue
		}
		idx[key(kv)] = len(out)
		out = append(out, kv)
	}
	return out
}
