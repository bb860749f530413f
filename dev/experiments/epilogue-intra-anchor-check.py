"""The algorithm of epilogue-intra-anchor.patch in float64 NumPy against the exact pair sums of
SPEC-chunk-bwd-intra.md steps 1, 2 and 5 (one K block of 32 channels, chunk sizes 32 and 64,
short chunks): the anchor rows 16, 32, 48 for pairs across 16-row blocks, exact pairs inside a
block. Prints the largest relative difference of dqa, r and dkc per case (float64 rounding,
~1e-16, when the patch's index ranges are right). Run: python3 dev/experiments/epilogue-intra-anchor-check.py"""
import numpy as np
rng=np.random.default_rng(0)
for L,length in [(64,64),(64,37),(32,20),(64,1),(64,17)]:
    C=32
    G=np.cumsum(-rng.uniform(0,5,(L,C)),axis=0)
    G[length:]=G[length-1]
    Kn=rng.normal(size=(L,C)); Qn=rng.normal(size=(L,C)); beta=rng.uniform(0,1,L)
    Kn[length:]=0; Qn[length:]=0; beta[length:]=0
    Pq=np.tril(rng.normal(size=(L,L))); Pk=np.tril(rng.normal(size=(L,L)),-1)
    Pq[length:]=0; Pk[length:]=0; Pq[:,length:]=0; Pk[:,length:]=0
    # exact
    dqa=np.zeros((L,C)); r=np.zeros((L,C)); dkc=np.zeros((L,C))
    for i in range(length):
        for j in range(i+1):
            d=np.exp(G[i]-G[j])
            dqa[i]+=Pq[i,j]*Kn[j]*d; r[i]+=Pk[i,j]*Kn[j]*d
            dkc[j]+=(Pq[i,j]*Qn[i]+Pk[i,j]*beta[i]*Kn[i])*d
    # anchor emulation
    A=np.zeros((L,C)); R=np.zeros((L,C)); D=np.zeros((L,C))
    for kA in range(16,L,16):
        kt=Kn[:kA]*np.exp(G[kA]-G[:kA])
        f=np.exp(G[kA:kA+16]-G[kA])
        xt=Qn[kA:kA+16]*f; yt=beta[kA:kA+16,None]*Kn[kA:kA+16]*f
        q_sum=Pq[kA:kA+16,:kA]@kt; r_sum=Pk[kA:kA+16,:kA]@kt
        t4=Pq[kA:kA+16,:kA].T@xt+Pk[kA:kA+16,:kA].T@yt
        for ii in range(16):
            i=kA+ii
            if i<length: A[i]+=q_sum[ii]*f[ii]; R[i]+=r_sum[ii]*f[ii]
        for j in range(kA):
            if j<length: D[j]+=t4[j]*np.exp(G[kA]-G[j])
    for i in range(length):
        for j in range(i&~15,i+1):
            d=np.exp(G[i]-G[j]); A[i]+=Pq[i,j]*Kn[j]*d; R[i]+=Pk[i,j]*Kn[j]*d
    for j in range(length):
        end=min((j|15)+1,length)
        for i in range(j,end):
            d=np.exp(G[i]-G[j]); D[j]+=(Pq[i,j]*Qn[i]+Pk[i,j]*beta[i]*Kn[i])*d
    err=lambda a,b: np.abs(a-b).max()/max(np.abs(b).max(),1e-30)
    print(L,length, err(A,dqa), err(R,r), err(D,dkc))
