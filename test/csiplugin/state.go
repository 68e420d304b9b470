// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// volume is what the plugin keeps about one staged volume, one JSON file
// in the state directory. The loop device is checked against the backing
// file before every use: after a restart, or after the device went away,
// the record alone is never trusted.
type volume struct {
	ID          string `json:"id"`
	BackingFile string `json:"backing_file"`
	// Access is AccessFilesystem or AccessBlock.
	Access      string `json:"access"`
	FSType      string `json:"fs_type,omitempty"`
	StagingPath string `json:"staging_path"`
	// Device is the loop device, e.g. /dev/loop3.
	Device string `json:"device"`
}

// stateDir holds the volume records. Callers serialize access.
type stateDir struct{ dir string }

func openStateDir(dir string) (*stateDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %q: %w", dir, err)
	}
	return &stateDir{dir: dir}, nil
}

// file names a record by a hash of the volume id: ids are any string the
// PV author chose, including slashes.
func (s *stateDir) file(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".json")
}

// load returns the record of id; ok is false when the volume is not
// staged.
func (s *stateDir) load(id string) (v volume, ok bool, err error) {
	b, err := os.ReadFile(s.file(id))
	if errors.Is(err, os.ErrNotExist) {
		return volume{}, false, nil
	}
	if err != nil {
		return volume{}, false, fmt.Errorf("read volume record %q: %w", s.file(id), err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return volume{}, false, fmt.Errorf("parse volume record %q: %w", s.file(id), err)
	}
	if v.ID != id {
		return volume{}, false, fmt.Errorf("volume record %q is for %q, not %q", s.file(id), v.ID, id)
	}
	return v, true, nil
}

// save writes the record through a temporary file and a rename, so a
// plugin killed mid-write leaves the old record or the new one.
func (s *stateDir) save(v volume) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := s.file(v.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write volume record %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, s.file(v.ID)); err != nil {
		return fmt.Errorf("write volume record %q: %w", s.file(v.ID), err)
	}
	return nil
}

func (s *stateDir) remove(id string) error {
	if err := os.Remove(s.file(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove volume record %q: %w", s.file(id), err)
	}
	return nil
}
