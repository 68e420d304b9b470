// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are everything the apiserver trusts, generated fresh per cluster.
type credentials struct {
	caPEM       []byte // CA that signed the serving certificate
	servingCert []byte
	servingKey  []byte
	saKey       []byte // signs service-account tokens
	saPub       []byte // verifies them
	adminToken  string
	// kubeletClientCert and kubeletClientKey are the apiserver's
	// credential towards kubelets (logs, exec): CN kube-apiserver-kubelet-client
	// in group system:masters, signed by the CA, so a kubelet that trusts
	// the CA for x509 and asks the apiserver by webhook lets it in.
	kubeletClientCert, kubeletClientKey []byte
	// caCert and caKey sign the kubelet client certificate.
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	// nodeTokens maps node name to the static token of user
	// system:node:<name> in group system:nodes.
	nodeTokens map[string]string
}

// credentialFiles are the paths of credentials written to a directory.
type credentialFiles struct {
	ca, servingCert, servingKey, saKey, saPub, tokens string
	kubeletClientCert, kubeletClientKey               string
}

func newCredentials(now time.Time) (*credentials, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hpmount-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encode serving key: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account signing key: %w", err)
	}
	saKeyPEM, err := privateKeyPEM(saKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account signing key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}

	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("generate admin token: %w", err)
	}
	return &credentials{
		caPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		servingKey:  keyPEM,
		saKey:       saKeyPEM,
		saPub:       pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		adminToken:  hex.EncodeToString(token),
		caCert:      caCert,
		caKey:       caKey,
		nodeTokens:  map[string]string{},
	}, nil
}

// addKubeletClient signs the apiserver's client certificate for kubelets.
func (c *credentials) addKubeletClient(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate kubelet client key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.caCert, &key.PublicKey, c.caKey)
	if err != nil {
		return fmt.Errorf("sign kubelet client certificate: %w", err)
	}
	if c.kubeletClientKey, err = privateKeyPEM(key); err != nil {
		return fmt.Errorf("encode kubelet client key: %w", err)
	}
	c.kubeletClientCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

// addNode makes a static token for user system:node:<name>.
func (c *credentials) addNode(name string) error {
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return fmt.Errorf("generate token of node %q: %w", name, err)
	}
	c.nodeTokens[name] = hex.EncodeToString(token)
	return nil
}

// tokenFile is the apiserver's --token-auth-file CSV: token,user,uid,"groups".
func (c *credentials) tokenFile() []byte {
	lines := c.adminToken + `,admin,admin,"system:masters"` + "\n"
	for name, token := range c.nodeTokens {
		user := "system:node:" + name
		lines += token + "," + user + "," + user + `,"system:nodes"` + "\n"
	}
	return []byte(lines)
}

func privateKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// write stores the credentials in dir, private parts mode 0600.
func (c *credentials) write(dir string) (credentialFiles, error) {
	f := credentialFiles{
		ca:          filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokens:      filepath.Join(dir, "tokens.csv"),

		kubeletClientCert: filepath.Join(dir, "kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "kubelet-client.key"),
	}
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.ca, c.caPEM, 0o644},
		{f.servingCert, c.servingCert, 0o644},
		{f.servingKey, c.servingKey, 0o600},
		{f.saKey, c.saKey, 0o600},
		{f.saPub, c.saPub, 0o644},
		{f.tokens, c.tokenFile(), 0o600},
		{f.kubeletClientCert, c.kubeletClientCert, 0o644},
		{f.kubeletClientKey, c.kubeletClientKey, 0o600},
	}
	for _, file := range files {
		if err := os.WriteFile(file.path, file.data, file.mode); err != nil {
			return credentialFiles{}, fmt.Errorf("write %q: %w", file.path, err)
		}
	}
	return f, nil
}
