package structs

import (
	"path"
	"path/filepath"
	"strings"
)

// Artifact getter modes, as Nomad's artifact `mode`.
const (
	ArtifactModeAny  = "any"
	ArtifactModeFile = "file"
	ArtifactModeDir  = "dir"
)

// Task events of the artifact hook, as in Nomad.
const (
	TaskDownloadingArtifacts   = "Downloading Artifacts"
	TaskArtifactDownloadFailed = "Failed Artifact Download"
)

// ArtifactArchiveTypes are the archive types an artifact unpacks: by the
// source's file extension, or named with options { archive = "<type>" }.
var ArtifactArchiveTypes = []string{"tar.gz", "tgz", "zip", "gz", "tar.bz2", "tbz2", "tar.xz", "txz", "tar"}

// ArtifactDefaultDest is where an artifact lands when it sets no
// destination: the task's local/ dir (NOMAD_TASK_DIR).
const ArtifactDefaultDest = "local/"

// TaskArtifact is Nomad's artifact block: Source is fetched into
// RelativeDest, relative to the task dir, before the task starts. The JSON
// names are Nomad's (api.TaskArtifact).
type TaskArtifact struct {
	GetterSource string `json:"GetterSource"`
	// GetterOptions are go-getter's URL options: checksum ("type:value")
	// and archive ("false" keeps an archive packed).
	GetterOptions map[string]string `json:"GetterOptions,omitempty"`
	// GetterHeaders are sent with HTTP requests.
	GetterHeaders map[string]string `json:"GetterHeaders,omitempty"`
	// GetterInsecure skips TLS certificate verification.
	GetterInsecure bool `json:"GetterInsecure,omitempty"`
	// GetterMode is any (the default), file or dir.
	GetterMode   string `json:"GetterMode,omitempty"`
	RelativeDest string `json:"RelativeDest,omitempty"`
	// Chown gives the fetched files to the task's user.
	Chown bool `json:"Chown,omitempty"`
}

// Mode is GetterMode, defaulting to any.
func (a *TaskArtifact) Mode() string {
	if a.GetterMode == "" {
		return ArtifactModeAny
	}
	return a.GetterMode
}

// Dest is RelativeDest with Nomad's default: local/ for modes any and dir,
// local/<base name of the source> for mode file.
func (a *TaskArtifact) Dest() string {
	switch {
	case a.RelativeDest != "":
		return a.RelativeDest
	case a.Mode() == ArtifactModeFile:
		src, _, _ := strings.Cut(a.GetterSource, "?")
		return filepath.Join("local", path.Base(src))
	default:
		return ArtifactDefaultDest
	}
}
