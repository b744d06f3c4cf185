package main

// The cluster's PKI: one CA, the API server's serving certificate, client certificates for the admin and the
// controller manager, and the ServiceAccount token signing key. ECDSA P-256 throughout (fast to generate).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate with its key.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// pkiFiles are the paths of the generated files.
type pkiFiles struct {
	caCert, caKey                 string
	servingCert, servingKey       string
	adminCert, adminKey           string
	controllerCert, controllerKey string
	serviceAccountKey             string
	serviceAccountPub             string
}

func newPKIFiles(dir string) pkiFiles {
	p := func(name string) string { return filepath.Join(dir, name) }
	return pkiFiles{
		caCert: p("ca.crt"), caKey: p("ca.key"),
		servingCert: p("apiserver.crt"), servingKey: p("apiserver.key"),
		adminCert: p("admin.crt"), adminKey: p("admin.key"),
		controllerCert: p("controller-manager.crt"), controllerKey: p("controller-manager.key"),
		serviceAccountKey: p("sa.key"), serviceAccountPub: p("sa.pub"),
	}
}

// generatePKI writes a fresh PKI into dir.
func generatePKI(dir string) (pkiFiles, error) {
	files := newPKIFiles(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return files, err
	}
	ca, err := newCertificate(nil, certificateSpec{commonName: "realkube-ca", isCA: true})
	if err != nil {
		return files, err
	}
	serving, err := newCertificate(ca, certificateSpec{
		commonName: "kube-apiserver",
		dnsNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		server:     true,
	})
	if err != nil {
		return files, err
	}
	admin, err := newCertificate(ca, certificateSpec{commonName: "kubernetes-admin", organizations: []string{"system:masters"}})
	if err != nil {
		return files, err
	}
	controller, err := newCertificate(ca, certificateSpec{commonName: "system:kube-controller-manager"})
	if err != nil {
		return files, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return files, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return files, err
	}
	writes := []struct {
		path string
		data []byte
	}{
		{files.caCert, ca.certPEM}, {files.caKey, ca.keyPEM},
		{files.servingCert, serving.certPEM}, {files.servingKey, serving.keyPEM},
		{files.adminCert, admin.certPEM}, {files.adminKey, admin.keyPEM},
		{files.controllerCert, controller.certPEM}, {files.controllerKey, controller.keyPEM},
		{files.serviceAccountKey, saKeyPEM},
		{files.serviceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return files, err
		}
	}
	return files, nil
}

// certificateSpec says what a certificate is for.
type certificateSpec struct {
	commonName    string
	organizations []string
	dnsNames      []string
	ips           []net.IP
	isCA          bool
	server        bool
}

// newCertificate creates a certificate signed by parent (self-signed when parent is nil).
func newCertificate(parent *keyPair, spec certificateSpec) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	switch {
	case spec.isCA:
		template.IsCA = true
		template.BasicConstraintsValid = true
		template.KeyUsage |= x509.KeyUsageCertSign
	case spec.server:
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	default:
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	signer, signerCert := key, template
	if parent != nil {
		signer, signerCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signerCert, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", spec.commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

// loadKeyPair reads a certificate and its key (the CA, to sign the nodes' certificates).
func loadKeyPair(certPath, keyPath string) (*keyPair, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
