package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// SPDX 2.3 document, restricted to the fields this package fills. Field
// names and required fields follow the SPDX 2.3 JSON schema.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	Homepage         string         `json:"homepage,omitempty"`
	LicenseConcluded string         `json:"licenseConcluded"`
	LicenseDeclared  string         `json:"licenseDeclared"`
	CopyrightText    string         `json:"copyrightText"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// SBOMOptions name the document and its subject.
type SBOMOptions struct {
	Name    string    // subject of the document, e.g. "tritonserver"
	Version string    // subject version; may be empty
	Epoch   time.Time // creationInfo.created
	Tool    string    // creator tool, e.g. "tritonbuild-0.1"
	// HostPackages own the host files of the base-libraries layer.
	HostPackages []HostPackage
	// Distro names the host distribution in package URLs ("debian").
	Distro string
}

// SBOM renders an SPDX 2.3 JSON document listing every tree as a package
// described by the document. It is deterministic: packages are sorted, the
// creation time is the epoch and the document namespace is derived from the
// content, never random.
func SBOM(trees []Tree, o SBOMOptions) ([]byte, error) {
	if o.Name == "" {
		o.Name = "image"
	}
	if o.Tool == "" {
		o.Tool = "tritonbuild"
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        strings.TrimSpace(o.Name + " " + o.Version),
		CreationInfo: spdxCreationInfo{
			Created:  o.Epoch.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: " + o.Tool},
		},
		Packages:      []spdxPackage{},
		Relationships: []spdxRelationship{},
	}
	sorted := append([]Tree(nil), trees...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	ids := map[string]bool{}
	for _, t := range sorted {
		if t.Name == "" {
			return nil, fmt.Errorf("SBOM: a tree at %q has no name", t.Dir)
		}
		id := "SPDXRef-Package-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(t.Name, "-"), "-")
		if ids[id] {
			return nil, fmt.Errorf("SBOM: two trees named %q", t.Name)
		}
		ids[id] = true
		p := spdxPackage{
			Name:             t.Name,
			SPDXID:           id,
			VersionInfo:      t.Version,
			DownloadLocation: orNoAssertion(t.SourceURL),
			FilesAnalyzed:    false,
			Homepage:         t.Homepage,
			LicenseConcluded: orNoAssertion(t.License),
			LicenseDeclared:  orNoAssertion(t.License),
			CopyrightText:    "NOASSERTION",
		}
		if t.SHA256 != "" {
			sum := strings.ToLower(t.SHA256)
			if !sha256Hex.MatchString(sum) {
				return nil, fmt.Errorf("SBOM: tree %q: sha256 %q is not 64 hex digits", t.Name, t.SHA256)
			}
			p.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}}
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{
			SPDXElementID: "SPDXRef-DOCUMENT", RelationshipType: "DESCRIBES", RelatedSPDXElement: id,
		})
	}
	if o.Distro == "" {
		o.Distro = "debian"
	}
	purlEscape := strings.NewReplacer("%", "%25", ":", "%3A", "+", "%2B", "/", "%2F")
	for _, h := range o.HostPackages {
		id := "SPDXRef-HostPackage-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(h.Name+"-"+h.Arch, "-"), "-")
		if ids[id] {
			continue
		}
		ids[id] = true
		doc.Packages = append(doc.Packages, spdxPackage{
			Name:             h.Name,
			SPDXID:           id,
			VersionInfo:      h.Version,
			DownloadLocation: "NOASSERTION",
			Homepage:         h.Homepage,
			LicenseConcluded: "NOASSERTION",
			LicenseDeclared:  "NOASSERTION",
			CopyrightText:    "NOASSERTION",
			ExternalRefs: []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl",
				Locator: fmt.Sprintf("pkg:deb/%s/%s@%s?arch=%s", o.Distro, h.Name, purlEscape.Replace(h.Version), h.Arch)}},
			Comment: "host distribution package providing shared libraries of the base-libraries layer",
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{
			SPDXElementID: "SPDXRef-DOCUMENT", RelationshipType: "DESCRIBES", RelatedSPDXElement: id,
		})
	}
	// The namespace must be unique per document content: hash the document
	// without it, then name it after that hash.
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	slug := strings.Trim(spdxIDUnsafe.ReplaceAllString(strings.ToLower(o.Name), "-"), "-")
	doc.DocumentNamespace = "https://spdx.org/spdxdocs/" + slug + "-" + hex.EncodeToString(sum[:16])
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func orNoAssertion(s string) string {
	if strings.TrimSpace(s) == "" {
		return "NOASSERTION"
	}
	return s
}
