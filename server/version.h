/* version.h - normd's version, reported by --version, GET /v2 and the startup line. */
#ifndef ND_VERSION_H
#define ND_VERSION_H
#define ND_VERSION_STRING "0.3.0"
#endif
