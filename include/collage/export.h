// COLLAGE_API marks what libcollage.so exports. The library is built with
// hidden visibility and keeps the symbols of what it links in (core, the
// backends) to itself, so a program or a Python process sees only this API
// and cannot clash with another copy of those libraries.
#pragma once

#define COLLAGE_API __attribute__((visibility("default")))
