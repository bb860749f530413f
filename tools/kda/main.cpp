#include <cstdio>
int main() {
  std::fprintf(stderr, "kda: not implemented yet\n");
  return 2;
}
